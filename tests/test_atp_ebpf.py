"""ATP's eBPF program (switches/ebpf/atp/) in the kernel, on the veths of a test bed.

The behaviour cases of atp-protocol.md are tests/atp_switch_cases.py's, run here on the
eBPF program (the ``switch`` fixture: one running switch per module, reset before each
case). The differential test feeds the same seeded frame sequences to the program and to
the embedded ATPPipeline, the reference, and asserts byte-identical copies out of the same
ports and equal counters at every step. Only the ECN queue legitimately differs (the
embedded pipeline is given a queue, the program keeps a phantom queue), so the phantom
queue is tested on its own: a burst beyond the threshold at a slow port rate is marked,
the same burst at a fast rate or with marking off is not, and the egress counter says so.
"""

from __future__ import annotations

import os
import random
from typing import Iterator

import numpy as np
import pytest

from atp_network import ATPNetwork, Faults, ps_endpoint, worker_endpoint
from atp_switch_cases import (  # noqa: F401 (collected here: the cases run on this module's switch)
    ALL_PORTS,
    JOB_PORTS,
    K,
    N,
    POOL,
    decode,
    program,
    result,
    test_a_duplicate_after_completion_goes_to_the_ps_again_with_the_stored_sums,
    test_a_duplicate_before_completion_is_dropped_and_counted_once,
    test_a_lost_result_ends_in_a_timeout_resend_answered_from_the_stored_result,
    test_a_resend_flushes_the_partial_sum_to_the_ps_and_frees_the_aggregator,
    test_a_resend_on_someone_elses_aggregator_passes_through_untagged,
    test_a_result_that_does_not_own_the_aggregator_frees_nothing_but_still_reaches_the_workers,
    test_another_job_on_a_taken_aggregator_is_tagged_and_goes_to_its_own_ps,
    test_ecn_on_one_contribution_reaches_every_worker_and_halves_its_window,
    test_n_contributions_make_a_full_sum_to_the_ps_whose_result_frees_and_multicasts,
    test_one_worker_jobs_sum_without_the_reference_codes_stale_values,
    test_other_traffic_is_forwarded_by_l2,
    test_overflow_packets_pass_through_to_the_ps_untouched,
    test_packets_the_switch_cannot_trust_are_counted_and_change_nothing,
    test_the_next_sequence_on_a_freed_aggregator_claims_it_and_overwrites_the_old_sums,
    test_the_ps_sums_a_collided_sequence_and_the_workers_adopt_the_new_index_it_names,
    update,
    vals,
)
from atp_switch_driver import EbpfATPSwitch, EmbeddedATPSwitch, egress_packets, ingress_events, reset
from protocol.atp import params
from protocol.atp.packet import ATPHeader, encode_payload
from protocol.atp.quantize import expected_sum
from protocol.packet import IPV4_OFFSET, Endpoint, build_frame, ipv4_checksum
from switches import standalone
from switches.ebpf.atp import compile as atp_compile
from switches.ebpf.atp import datapath as atp_datapath
from switches.ebpf.atp import maps, programming
from switches.embedded.atp.pipeline import ATPPipeline
from tests.conftest import require_target
from tests.switch_io import vlan_tagged
from tests.test_ebpf_target import ingress_filters, map_exists, wait_until
from base.netns import Testbed

pytestmark = [pytest.mark.netns, pytest.mark.ebpf]


def test_schema_is_the_embedded_pipelines_and_the_phantom_queues_rate() -> None:
    """The same tables (keys, actions, widths), registers and counters as the reference, plus
    the one register only this target has: each port's phantom queue rate."""
    schema, embedded = maps.program_schema(K, POOL), ATPPipeline(K, POOL).schema()
    assert (schema.tables, schema.counters) == (embedded.tables, embedded.counters)
    assert {name: spec for name, spec in schema.registers.items() if name != maps.PHANTOM_QUEUE_RATE} == embedded.registers
    assert schema.registers[maps.PHANTOM_QUEUE_RATE].size == maps.PORT_NUMBERS


def test_the_build_reads_atps_constants_and_follows_k_and_the_pool() -> None:
    header = atp_compile.params_header()
    for name, index in params.EVENT.items():
        assert f"#define ATP_{name} {index}\n" in header
    options = atp_compile.CompileOptions(k=K, pool_size=POOL)
    assert atp_compile.build_hash(options) != atp_compile.build_hash(atp_compile.CompileOptions(k=K, pool_size=POOL + 1))
    assert atp_compile.build_hash(options) != atp_compile.build_hash(atp_compile.CompileOptions(k=2 * K, pool_size=POOL))
    with pytest.raises(ValueError, match="pool size"):
        atp_compile.CompileOptions(k=K, pool_size=params.MAX_POOL_SIZE + 1)


@pytest.fixture(scope="module")
def bed() -> Iterator[Testbed]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    require_target("ebpf")
    with standalone.testbed(len(ALL_PORTS)) as testbed:
        yield testbed


def ebpf_switch(bed: Testbed, k: int = K, pool_size: int = POOL) -> EbpfATPSwitch:
    switch = EbpfATPSwitch(bed, k, pool_size)
    try:
        program(switch)
    except BaseException:
        switch.close()
        raise
    return switch


@pytest.fixture(scope="module")
def running(bed: Testbed) -> Iterator[EbpfATPSwitch]:
    switch = ebpf_switch(bed)
    try:
        yield switch
    finally:
        switch.close()


@pytest.fixture
def switch(running: EbpfATPSwitch) -> Iterator[EbpfATPSwitch]:
    reset(running)
    yield running
    assert running.stray_frames(grace_s=0.0) == [], "frames the egress counter does not account for"


def test_start_sets_the_phantom_queues_and_stop_leaves_no_filter_pin_or_map() -> None:
    """ATP's program goes through the target's one loader (SwitchML's lifecycle tests in
    test_ebpf_target.py cover it); here, that a start given the link rate sets its ports'
    phantom queues, and that nothing of ATP's outlives stop()."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    require_target("ebpf")
    with standalone.testbed(2) as own_bed:
        ifnames = list(own_bed.switch_ports.values())
        switch = EbpfATPSwitch(own_bed, K, POOL, port_rate_bps=10e9)
        map_ids = switch.data_plane.map_ids
        assert all(len(ingress_filters(ifname)) == 1 for ifname in ifnames)
        rates = switch.control.register_read(programming.PHANTOM_QUEUE_RATE)
        assert rates[:2] == [10_000_000] * 2 and not any(rates[2:]), "the ports' phantom queues drain at the link rate given"
        assert not atp_datapath.PIN_ROOT.exists(), "pins are removed once the filters hold the program"
        switch.close()
        assert not any(ingress_filters(ifname) for ifname in ifnames)
        assert wait_until(lambda: not any(map_exists(i) for i in map_ids.values())), "maps outlived the switch"


# -- the differential test ------------------------------------------------------------------

STEPS = 400
SEEDS = (20261206, 7)
SEQS = (1, 2, 3)
AGGREGATORS = (0, 5, POOL - 1)


def random_frames(seed: int) -> list[tuple[int, bytes]]:
    """A seeded sequence over every path of the program: two jobs' packets (fresh, duplicate,
    resend, overflow, upstream ECN) on three aggregators and sequences, so claims, collisions,
    completions, duplicates and flushes are frequent; the PSes' results (owning, not owning,
    float requests); untrusted packets (wrong job, another's bit, strangers, a worker posing
    as the PS, malformed lengths, sequence 0, an index beyond the pool); ordinary traffic
    (known and unknown destinations, wrong IPv4 checksums, 802.1Q tags)."""
    rng = random.Random(seed)
    frames: list[tuple[int, bytes]] = []
    for _ in range(STEPS):
        app_id = rng.choice((1, 2))
        w, seq, agtr = rng.randrange(N), rng.choice(SEQS), rng.choice(AGGREGATORS)
        values = vals(rng.randrange(1 << 16))
        kind = rng.choices(["update", "resend", "result", "flagged", "untrusted", "malformed", "ordinary"],
                           weights=[40, 10, 15, 8, 8, 8, 11])[0]
        if kind == "update":
            frames.append(update(app_id, w, seq, agtr, values))
        elif kind == "resend":
            frames.append(update(app_id, w, seq, agtr, values, params.FLAG_RESEND))
        elif kind == "result":
            flags = rng.choice([params.FLAG_ACK, params.FLAG_ACK | params.FLAG_ECN, params.FLAG_ACK | params.FLAG_OVERFLOW,
                                params.FLAG_ACK | params.FLAG_OVERFLOW | params.FLAG_RESEND])
            frames.append(result(app_id, seq, agtr, values, flags))
        elif kind == "flagged":
            frames.append(update(app_id, w, seq, agtr, values, rng.choice([params.FLAG_ECN, params.FLAG_OVERFLOW, params.FLAG_COLLISION])))
        elif kind == "untrusted":
            source = rng.choice([worker_endpoint(app_id, w), ps_endpoint(app_id), Endpoint("02:00:00:00:99:99", "10.9.9.9", 1)])
            header = ATPHeader(rng.choice([1 << w, 0b11, 0]), N, rng.choice([0, params.FLAG_ACK]), rng.choice((1, 2, 3)), seq, agtr,
                               params.NO_INDEX)
            frames.append((rng.choice(ALL_PORTS), build_frame(source, ps_endpoint(app_id), encode_payload(header, values))))
        elif kind == "malformed":
            port, frame = update(app_id, w, rng.choice([seq, 0]), rng.choice([agtr, POOL, 0xFFFF]), values)
            frames.append((port, rng.choice([frame, frame[:-4], frame + b"\0\0\0\0"])))
        else:
            source = worker_endpoint(app_id, w)
            destination = rng.choice([worker_endpoint(1, 1), ps_endpoint(2), Endpoint("ff:ff:ff:ff:ff:ff", "10.9.9.9", 53)])
            frame = bytearray(build_frame(source, destination, bytes(rng.randrange(0, 80))))
            if rng.random() < 0.3:
                frame[IPV4_OFFSET + 10] ^= 0xFF  # a wrong IPv4 checksum: fixed on the way out
            if rng.random() < 0.2:
                frame = bytearray(vlan_tagged(bytes(frame), rng.randrange(1, 4095)))  # ordinary, left as it is
            frames.append((JOB_PORTS[app_id][0][w], bytes(frame)))
    return frames


@pytest.mark.parametrize("seed", SEEDS)
def test_the_program_sends_and_counts_what_the_embedded_pipeline_does(switch: EbpfATPSwitch, seed: int) -> None:
    reference = EmbeddedATPSwitch(K, POOL)
    program(reference)
    hosts = {worker_endpoint(1, 1).mac: JOB_PORTS[1][0][1], ps_endpoint(2).mac: JOB_PORTS[2][1]}
    for target in (reference, switch):
        for mac, port in hosts.items():
            target.control.table_add(programming.L2_TABLE, "l2_forward", [mac], [port])
    for step, (in_port, frame) in enumerate(random_frames(seed)):
        expected = reference.process(in_port, frame)
        assert switch.process(in_port, frame) == expected, f"step {step}: {frame.hex()} on port {in_port}"
    for counter in (programming.EVENT_COUNTER, programming.EGRESS_COUNTER):
        assert switch.control.counter_read(counter) == reference.control.counter_read(counter), counter
    for register in programming.AGGREGATOR_REGISTERS:
        assert switch.control.register_read(register) == reference.control.register_read(register), register
    assert switch.stray_frames() == []


def test_workers_on_several_cores_at_once_sum_exactly(switch: EbpfATPSwitch) -> None:
    """The three workers' packets for every aggregator of the pool arrive at once, a process
    each, so the program runs on several cores together (both cores of the CI machine count
    events): every sum reaches the PS complete and exact, round after round (each round's
    results free the pool). The aggregator's lock is what makes this hold; the window a race
    needs (two cores inside one aggregator's k-value loop) is narrow, and on a loaded 2-core
    machine a build without the lock also passed 1,280 sums at k = 256, so this case guards
    the concurrent path as a whole more than it proves the lock."""
    rounds, ps_port = 20, JOB_PORTS[1][1]
    for round_ in range(rounds):
        seqs = range(1 + round_ * POOL, 1 + (round_ + 1) * POOL)
        contributions = {(w, seq): vals(seq * N + w) for w in range(N) for seq in seqs}
        bursts = {port: [update(1, w, seq, seq % POOL, contributions[w, seq])[1] for seq in seqs]
                  for w, port in enumerate(JOB_PORTS[1][0])}
        sums = switch.blast(bursts)
        assert sorted(decode(frame)[0].seq for _port, frame in sums) == list(seqs), f"round {round_}"
        for port, frame in sums:
            header, values = decode(frame)
            assert port == ps_port and header.bitmap == 0b111
            assert np.array_equal(values, sum(contributions[w, header.seq] for w in range(N))), f"sequence {header.seq}"
        for seq in seqs:
            switch.process(*result(1, seq, seq % POOL, vals(0)))
    assert ingress_events(switch) == {"EV_AGGREGATED": 2 * rounds * POOL, "EV_FULL_TO_PS": rounds * POOL,
                                      "EV_RESULT_FREED": rounds * POOL}


def test_two_jobs_sharing_every_aggregator_end_exact_through_loss_duplicates_and_reordering(switch: EbpfATPSwitch) -> None:
    """The hosts' cores (tests/atp_network.py) on the eBPF switch: two jobs whose positions cover
    the whole pool, so they collide, with frames lost, duplicated and reordered on every hop;
    every worker ends with its job's exact sum, and the switch saw collisions and flushes."""
    net = ATPNetwork(K, POOL, Faults(seed=3, loss=0.03, duplicate=0.05, reorder=0.1), switch=switch)
    rng = np.random.default_rng(4)
    inputs = {app_id: [rng.integers(-(2**31), 2**31, 40 * K, dtype=np.int64).astype(np.int32) for _ in range(N)]
              for app_id in (1, 2)}
    jobs = [net.add_job(app_id, tensors, positions=POOL) for app_id, tensors in inputs.items()]
    assert [(job.worker_ports, job.ps_port) for job in jobs] == [tuple(JOB_PORTS[1]), tuple(JOB_PORTS[2])]
    net.run(until_s=60.0)
    for job in jobs:
        expected = expected_sum(inputs[job.app_id], N, 0).int_sum
        assert all(core.finished and np.array_equal(core.result, expected) for core in job.workers), f"job {job.app_id}"
    counted = ingress_events(switch)
    assert counted.get("EV_COLLISION_TO_PS") and counted.get("EV_FULL_TO_PS"), counted
    assert counted.get("EV_RESEND_FLUSHED", 0) + counted.get("EV_RESEND_PASSED", 0) > 0, counted


# -- the phantom queue ------------------------------------------------------------------------

BURST = 40
THRESHOLD = 8
SLOW_BPS = 10e3
"""A port rate at which BURST frames queue up far beyond THRESHOLD: one 106-byte frame takes
85 ms, and the burst is sent back to back (a few milliseconds, even on a loaded machine)."""
FAST_BPS = 400e9
"""A port rate at which no frame waits for another (a few nanoseconds each)."""


def burst_to_ps(switch: EbpfATPSwitch, first_seq: int) -> list[bytes]:
    """BURST resends (each passes to the PS at once) sent back to back: what reaches the PS, in order."""
    frames = [update(1, 0, seq, 5, vals(seq), params.FLAG_RESEND)[1] for seq in range(first_seq, first_seq + BURST)]
    copies = switch.blast({JOB_PORTS[1][0][0]: frames})
    assert [decode(frame)[0].seq for _port, frame in copies] == list(range(first_seq, first_seq + BURST))
    return [frame for _port, frame in copies]


def test_the_phantom_queue_marks_a_burst_beyond_the_threshold_at_the_ports_rate(switch: EbpfATPSwitch) -> None:
    control, ps_port = switch.control, JOB_PORTS[1][1]
    control.register_write(programming.ECN_THRESHOLD, 0, THRESHOLD)
    try:
        programming.set_phantom_queue_rates(control, {ps_port: SLOW_BPS})
        slow = burst_to_ps(switch, 1)
        marked = [frame for frame in slow if decode(frame)[0].flags & params.FLAG_ECN]
        assert slow[0] not in marked and slow[-1] in marked, "the queue builds up: the first leaves unmarked, the last marked"
        for frame in marked:
            assert frame[IPV4_OFFSET + 1] & 0b11 == 0b11
            assert ipv4_checksum(frame, IPV4_OFFSET) == int.from_bytes(frame[IPV4_OFFSET + 10:IPV4_OFFSET + 12], "big")
        assert egress_packets(switch) == [BURST, len(marked)], "the egress counter records what the phantom queue marked"
        assert control.register_read(programming.PHANTOM_QUEUE_RATE, ps_port) == SLOW_BPS / 1000

        programming.set_phantom_queue_rates(control, {ps_port: FAST_BPS})
        assert not any(decode(frame)[0].flags & params.FLAG_ECN for frame in burst_to_ps(switch, 1 + BURST))
        programming.set_phantom_queue_rates(control, {ps_port: SLOW_BPS})
        control.register_write(programming.ECN_THRESHOLD, 0, 0)
        assert not any(decode(frame)[0].flags & params.FLAG_ECN for frame in burst_to_ps(switch, 1 + 2 * BURST)), "0: marking off"
        assert egress_packets(switch)[1] == len(marked)
    finally:
        programming.set_phantom_queue_rates(control, {ps_port: 0})
        control.register_write(programming.ECN_THRESHOLD, 0, params.DEFAULT_ECN_THRESHOLD)


def test_without_a_rate_the_phantom_queue_never_marks(switch: EbpfATPSwitch) -> None:
    """A port whose rate the control plane never set has no phantom queue: the program starts so."""
    assert switch.control.register_read(programming.ECN_THRESHOLD, 0) == params.DEFAULT_ECN_THRESHOLD
    assert not any(switch.control.register_read(programming.PHANTOM_QUEUE_RATE))
    results = [frame for _port, frame in switch.process(*result(1, 1, 5, vals(0)))]
    assert not any(decode(frame)[0].flags & params.FLAG_ECN for frame in burst_to_ps(switch, 1) + results)
    assert egress_packets(switch) == [BURST + N, 0]


def test_the_largest_k_aggregates_exactly() -> None:
    """k = 256: 1 KiB of values per packet (the scratch cell), the verifier's largest program,
    on a test bed of its own (one switch per port)."""
    k, index = 256, params.DEFAULT_POOL_SIZE - 1
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    require_target("ebpf")
    with standalone.testbed(len(ALL_PORTS)) as own_bed:
        big = ebpf_switch(own_bed, k=k, pool_size=params.DEFAULT_POOL_SIZE)
        try:
            contributions = [np.random.default_rng(w).integers(-(2**31), 2**31, k).astype(np.int32) for w in range(N)]
            out = []
            for w, values in enumerate(contributions):
                payload = encode_payload(ATPHeader(1 << w, N, 0, 1, 1, index, params.NO_INDEX), values)
                out += big.process(JOB_PORTS[1][0][w], build_frame(worker_endpoint(1, w), ps_endpoint(1), payload))
            [(port, frame)] = out
            summed = np.frombuffer(frame, ">i4", k, len(frame) - 4 * k)
            assert port == JOB_PORTS[1][1] and np.array_equal(summed, sum(c.astype(np.int64) for c in contributions).astype(np.int32))
        finally:
            big.close()
