"""ATP's eBPF program (switches/ebpf/atp/) in the kernel, on the veths of a test bed.

``EbpfATPSwitch`` is the eBPF implementation of tests/atp_switch_driver.py's interface. The
behaviour cases of atp-protocol.md that involve the switch are tests/atp_switch_cases.py's,
run here on the program (``TestSwitchCases`` and the ``switch`` fixture: one running switch
per module, reset before each case). The differential test (tests/atp_differential.py) feeds
the same seeded frame sequences to the program and to the embedded ATPPipeline, the
reference, and asserts byte-identical copies out of the same ports and equal counters at
every step. Only the ECN queue legitimately differs (the embedded pipeline is given a queue,
the program keeps a phantom queue), so the phantom queue is tested on its own: a burst
beyond the threshold at a slow port rate is marked, the same burst at a fast rate or with
marking off is not, and the egress counter says so; frames below the port's rate are never
marked, and the queue holds no more than the port's real queue, so a burst beyond that limit
stops marking once the limit's worth has drained.
"""

from __future__ import annotations

import multiprocessing
import os
import select
import time
from typing import Iterator, Mapping, Sequence

import numpy as np
import pytest

from atp_differential import DIFFERENTIAL_CASES, assert_sends_and_counts_as_the_reference, program_hosts
from atp_network import ATPNetwork, Faults, ps_endpoint, worker_endpoint
from atp_switch_cases import ALL_PORTS, JOB_PORTS, K, N, POOL, SwitchCases, decode, program, result, update, vals
from atp_switch_driver import ATPSwitchDriver, Copies
from base.netns import Testbed
from protocol.atp import params
from protocol.atp.packet import ATPHeader, encode_payload
from protocol.atp.quantize import expected_sum
from protocol.packet import IPV4_OFFSET, build_frame, ipv4_checksum
from switches import standalone
from switches.atp import programming
from switches.ebpf.atp import compile as atp_compile
from switches.ebpf.atp import datapath as atp_datapath
from switches.ebpf.atp import maps
from switches.ebpf.atp.control import AtpEbpfControl
from switches.ebpf.atp.datapath import AtpEbpfDataPlane
from switches.embedded.atp.pipeline import ATPPipeline
from tests.conftest import require_target
from tests.switch_io import SwitchPorts
from tests.test_ebpf_target import ingress_filters, map_exists, wait_until

pytestmark = [pytest.mark.netns, pytest.mark.ebpf]

WAIT_S = 5.0
"""Longest wait for a frame's ingress event or its copies: far beyond what a healthy switch needs."""
SENT = params.EGRESS_EVENT["EGV_SENT"]
FORK = multiprocessing.get_context("fork")
"""blast()'s senders: processes, which send on the raw sockets they inherit in parallel (threads
would take turns at the GIL between two sends)."""


class EbpfATPSwitch(ATPSwitchDriver):
    """atp.bpf.c on ``testbed``'s switch ports, renumbered 0..n-1 by host: port p is host p's
    cable. A frame is sent from host p's raw socket, and ``process`` returns once the program
    counted the frame's ingress event (it counts it after every copy's egress event) and as
    many frames as it counted at egress have arrived."""

    control: AtpEbpfControl

    def __init__(self, testbed: Testbed, k: int, pool_size: int, port_rate_bps: float | None = None,
                 port_queue_packets: int | None = None) -> None:
        ports = {host.index: testbed.switch_ports[host.switch_port] for host in testbed.hosts}
        self.data_plane = AtpEbpfDataPlane(ports, k=k, pool_size=pool_size, name="atp-tests", port_rate_bps=port_rate_bps,
                                           port_queue_packets=port_queue_packets)
        self.data_plane.start()
        try:
            super().__init__(self.data_plane.control(), k, pool_size)
            self.ports = SwitchPorts(testbed)
        except BaseException:
            self.data_plane.stop()
            raise

    def close(self) -> None:
        self.ports.close()
        self.control.close()
        self.data_plane.stop()

    def _counted(self) -> tuple[int, int]:
        ingress = sum(packets for packets, _bytes in self.control.counter_read(programming.EVENT_COUNTER))
        return ingress, self.control.counter_read(programming.EGRESS_COUNTER)[SENT][0]

    def process(self, in_port: int, frame: bytes) -> Copies:
        counted = self._counted()
        self.ports.send(in_port, frame)
        return self._copies(counted, 1)

    def blast(self, frames: Mapping[int, Sequence[bytes]]) -> Copies:
        """Every port's frames sent back to back, the ports at once (a process each), so the
        kernel runs the program for them on several cores together: the copies that leave."""
        counted = self._counted()
        start = FORK.Barrier(len(frames))

        def send(port: int, burst: Sequence[bytes]) -> None:
            start.wait()  # all at once, not one after the other as they fork
            for frame in burst:
                self.ports.send(port, frame)

        senders = [FORK.Process(target=send, args=(port, burst)) for port, burst in frames.items()]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        return self._copies(counted, sum(len(burst) for burst in frames.values()))

    def _copies(self, counted: tuple[int, int], total: int) -> Copies:
        """Once the ingress events of ``total`` more frames than ``counted`` are in, the copies
        the egress counter says they made."""
        ingress, sent = counted
        deadline = time.monotonic() + WAIT_S
        while (now := self._counted())[0] < ingress + total:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the eBPF switch counted {now[0] - ingress} of the {total} frames sent")
        copies: Copies = []
        sockets = self.ports.sockets
        while len(copies) < now[1] - sent:
            ready, _, _ = select.select(sockets, [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"{len(copies)} of the {now[1] - sent} copies the eBPF switch sent arrived")
            for sock in ready:
                port = sockets.index(sock)
                received = self.ports.receive_frame(port)
                if received is not None:
                    copies.append((port, received))
        return sorted(copies, key=lambda copy: copy[0])

    def stray_frames(self, grace_s: float = 0.2) -> Copies:
        """Frames that arrived beyond what the egress counter accounts for (none, if healthy)."""
        ready, _, _ = select.select(self.ports.sockets, [], [], grace_s)
        return [(self.ports.sockets.index(sock), frame) for sock in ready
                if (frame := self.ports.receive_frame(self.ports.sockets.index(sock))) is not None]



def test_schema_is_the_embedded_pipelines_and_the_phantom_queues() -> None:
    """The same tables (keys, actions, widths), registers and counters as the reference, plus
    the registers only this target has: each port's phantom queue rate and limit."""
    schema, embedded = maps.program_schema(K, POOL), ATPPipeline(K, POOL).schema()
    assert (schema.tables, schema.counters) == (embedded.tables, embedded.counters)
    assert {name: spec for name, spec in schema.registers.items() if name not in maps.PHANTOM_QUEUE_FIELDS} == embedded.registers
    assert [schema.registers[name].size for name in maps.PHANTOM_QUEUE_FIELDS] == [maps.PORT_NUMBERS] * 2


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
    running.reset()
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
        switch = EbpfATPSwitch(own_bed, K, POOL, port_rate_bps=10e9, port_queue_packets=200)
        map_ids = switch.data_plane.map_ids
        assert all(len(ingress_filters(ifname)) == 1 for ifname in ifnames)
        rates = switch.control.register_read(maps.PHANTOM_QUEUE_RATE)
        assert rates[:2] == [10_000_000] * 2 and not any(rates[2:]), "the ports' phantom queues drain at the link rate given"
        limits = switch.control.register_read(maps.PHANTOM_QUEUE_LIMIT)
        assert limits[:2] == [200] * 2 and not any(limits[2:]), "and hold what the link's queue holds"
        assert not atp_datapath.PIN_ROOT.exists(), "pins are removed once the filters hold the program"
        switch.close()
        assert not any(ingress_filters(ifname) for ifname in ifnames)
        assert wait_until(lambda: not any(map_exists(i) for i in map_ids.values())), "maps outlived the switch"


class TestSwitchCases(SwitchCases):
    """atp_switch_cases's cases on the eBPF program (this module's ``switch``)."""


# -- the differential test ------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(DIFFERENTIAL_CASES))
def test_the_program_sends_and_counts_what_the_embedded_pipeline_does(case: str) -> None:
    """tests/atp_differential.py's sequences, each on a switch built for its k on a test bed of its own."""
    k, seed, count = DIFFERENTIAL_CASES[case]
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    require_target("ebpf")
    with standalone.testbed(len(ALL_PORTS)) as own_bed:
        target = ebpf_switch(own_bed, k=k)
        try:
            assert_sends_and_counts_as_the_reference(program_hosts(target), "eBPF", seed, count)
            assert target.stray_frames() == []
        finally:
            target.close()


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
    assert switch.events() == {"EV_AGGREGATED": 2 * rounds * POOL, "EV_FULL_TO_PS": rounds * POOL,
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
    counted = switch.events()
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


def burst_to_ps(switch: EbpfATPSwitch, first_seq: int, count: int = BURST) -> list[bytes]:
    """``count`` resends (each passes to the PS at once) sent back to back: what reaches the PS, in order."""
    frames = [update(1, 0, seq, 5, vals(seq), params.FLAG_RESEND)[1] for seq in range(first_seq, first_seq + count)]
    copies = switch.blast({JOB_PORTS[1][0][0]: frames})
    assert [decode(frame)[0].seq for _port, frame in copies] == list(range(first_seq, first_seq + count))
    return [frame for _port, frame in copies]


def is_marked(frame: bytes) -> bool:
    return bool(decode(frame)[0].flags & params.FLAG_ECN)


def frame_seconds(rate_bps: float) -> float:
    """How long one of burst_to_ps's frames takes at ``rate_bps``."""
    return 8 * len(update(1, 0, 1, 5, vals(1))[1]) / rate_bps


def test_the_phantom_queue_marks_a_burst_beyond_the_threshold_at_the_ports_rate(switch: EbpfATPSwitch) -> None:
    control, ps_port = switch.control, JOB_PORTS[1][1]
    control.register_write(programming.ECN_THRESHOLD, 0, THRESHOLD)
    try:
        control.set_phantom_queue(ps_port, SLOW_BPS, BURST)
        slow = burst_to_ps(switch, 1)
        marked = [frame for frame in slow if decode(frame)[0].flags & params.FLAG_ECN]
        assert slow[0] not in marked and slow[-1] in marked, "the queue builds up: the first leaves unmarked, the last marked"
        for frame in marked:
            assert frame[IPV4_OFFSET + 1] & 0b11 == 0b11
            assert ipv4_checksum(frame, IPV4_OFFSET) == int.from_bytes(frame[IPV4_OFFSET + 10:IPV4_OFFSET + 12], "big")
        assert switch.egress_packets() == [BURST, len(marked), 0], "the egress counter records what the phantom queue marked"
        assert control.register_read(maps.PHANTOM_QUEUE_RATE, ps_port) == SLOW_BPS / 1000

        control.set_phantom_queue(ps_port, FAST_BPS, BURST)
        assert not any(decode(frame)[0].flags & params.FLAG_ECN for frame in burst_to_ps(switch, 1 + BURST))
        control.set_phantom_queue(ps_port, SLOW_BPS, BURST)
        control.register_write(programming.ECN_THRESHOLD, 0, 0)
        assert not any(decode(frame)[0].flags & params.FLAG_ECN for frame in burst_to_ps(switch, 1 + 2 * BURST)), "0: marking off"
        assert switch.egress_packets()[1] == len(marked)
    finally:
        control.set_phantom_queue(ps_port, 0, 0)
        control.register_write(programming.ECN_THRESHOLD, 0, params.DEFAULT_ECN_THRESHOLD)


LIMIT = THRESHOLD + 2
"""A port queue's limit above the threshold, far below BURST."""


def test_the_phantom_queue_holds_no_more_than_the_ports_queue(switch: EbpfATPSwitch) -> None:
    """A burst of BURST frames into a port whose queue holds LIMIT: the real queue drops what does
    not fit, so the phantom queue holds LIMIT frames at most. The burst marks; once LIMIT frames'
    time has passed the queue is empty, and the next frame leaves unmarked. (A queue without the
    limit would still hold BURST - LIMIT frames then, far beyond the threshold, and mark it: at
    SLOW_BPS the burst is 3.4 s of work, sent in milliseconds; a test slowed by a busy machine
    only waits longer, which an unbounded queue may drain, never a bounded one refill.)"""
    control, ps_port = switch.control, JOB_PORTS[1][1]
    control.register_write(programming.ECN_THRESHOLD, 0, THRESHOLD)
    try:
        control.set_phantom_queue(ps_port, SLOW_BPS, LIMIT)
        burst = burst_to_ps(switch, 1)
        assert not any(map(is_marked, burst[:THRESHOLD])) and is_marked(burst[-1]), "the burst marks once the threshold is reached"
        time.sleep(LIMIT * frame_seconds(SLOW_BPS))
        assert not any(map(is_marked, burst_to_ps(switch, 1 + BURST, 1))), "a full queue drains in LIMIT frames' time"
    finally:
        control.set_phantom_queue(ps_port, 0, 0)
        control.register_write(programming.ECN_THRESHOLD, 0, params.DEFAULT_ECN_THRESHOLD)


def test_frames_below_the_ports_rate_are_never_marked(switch: EbpfATPSwitch) -> None:
    """Frames each sent after the one before has left (a load below the port's rate) find the
    queue empty, however many come: with the threshold at 1, none is marked. A busy machine
    only spaces them further."""
    control, ps_port = switch.control, JOB_PORTS[1][1]
    rate_bps = 4 * SLOW_BPS
    """A frame takes 21 ms: the burst's frames, sent back to back, queue behind each other."""
    control.register_write(programming.ECN_THRESHOLD, 0, 1)
    try:
        control.set_phantom_queue(ps_port, rate_bps, LIMIT)
        paced = []
        for seq in range(1, 1 + 2 * LIMIT):
            paced += burst_to_ps(switch, seq, 1)
            time.sleep(2 * frame_seconds(rate_bps))
        assert not any(map(is_marked, paced))
        assert any(map(is_marked, burst_to_ps(switch, 1 + 2 * LIMIT, LIMIT))), "at the same rate, a burst marks"
    finally:
        control.set_phantom_queue(ps_port, 0, 0)
        control.register_write(programming.ECN_THRESHOLD, 0, params.DEFAULT_ECN_THRESHOLD)


def test_without_a_rate_the_phantom_queue_never_marks(switch: EbpfATPSwitch) -> None:
    """A port whose rate the control plane never set has no phantom queue: the program starts so."""
    assert switch.control.register_read(programming.ECN_THRESHOLD, 0) == params.DEFAULT_ECN_THRESHOLD
    assert not any(switch.control.register_read(maps.PHANTOM_QUEUE_RATE))
    results = [frame for _port, frame in switch.process(*result(1, 1, 5, vals(0)))]
    assert not any(decode(frame)[0].flags & params.FLAG_ECN for frame in burst_to_ps(switch, 1) + results)
    assert switch.egress_packets() == [BURST + N, 0, 0]


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
