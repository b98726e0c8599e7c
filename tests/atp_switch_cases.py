"""The behaviour cases of atp-protocol.md for ATP's switch on any target (numbered in comments).

Each case takes a ``switch`` fixture (tests/atp_switch_driver.py: ``process`` and ``control``),
so every target's test module runs the same cases by importing them and giving its own
fixture (test_atp_switch.py the embedded pipeline, test_atp_ebpf.py the eBPF program). The
fixture is a switch built by ``program`` for K values, POOL aggregators and JOB_PORTS, with
fresh aggregators and counters. Frames are crafted with protocol/atp/packet.py; where a case
spans the hosts (a collision's new index, ECN halving the window), the PS and worker cores of
hosts/atp take the switch's output. Jobs 1 and 2 share the switch on ports 0-3 and 4-7, and
job 3 (one worker) on ports 0 and 1 from its own addresses.
"""

from __future__ import annotations

import numpy as np

from atp_network import ATPNetwork, Faults, ps_endpoint, worker_endpoint
from atp_switch_driver import ATPSwitch, aggregator_values, egress_packets, ingress_events, owner, register
from hosts.atp.aggregators import AggregatorMap
from hosts.atp.parameter_server import ParameterServerCore
from hosts.atp.worker import WorkerConfig, WorkerCore
from protocol.atp import params
from protocol.atp.packet import ATP_OFFSET, ATPHeader, decode_payload, encode_payload
from protocol.packet import IPV4_OFFSET, Endpoint, build_frame
from switches.ebpf.atp import programming

K, N, POOL = 8, 3, 16
JOB_PORTS = {1: ([0, 1, 2], 3), 2: ([4, 5, 6], 7), 3: ([0], 1)}
ALL_PORTS = list(range(8))
SWITCH_ADDRESS = Endpoint("02:53:4d:4c:00:01", "10.0.0.254", params.SWITCH_UDP_PORT)


def host(endpoint: Endpoint, port: int) -> programming.AtpHost:
    return programming.AtpHost(port, endpoint.mac, endpoint.ipv4, endpoint.udp_port)


def program(switch: ATPSwitch) -> None:
    """What the control plane installs: the flood group and every job of JOB_PORTS."""
    programming.program_forwarding(switch.control, ALL_PORTS, {})
    for app_id, (workers, ps) in JOB_PORTS.items():
        programming.program_job(switch.control, app_id, [host(worker_endpoint(app_id, w), port) for w, port in enumerate(workers)],
                                host(ps_endpoint(app_id), ps))


def vals(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-(2**20), 2**20, K).astype(np.int32)


def update(app_id: int, w: int, seq: int, agtr: int, values: np.ndarray, flags: int = 0, n: int = N) -> tuple[int, bytes]:
    """Worker w of job app_id's packet, as it enters the switch (port, frame)."""
    payload = encode_payload(ATPHeader(1 << w, n, flags, app_id, seq, agtr, params.NO_INDEX), values)
    return JOB_PORTS[app_id][0][w], build_frame(worker_endpoint(app_id, w), ps_endpoint(app_id), payload)


def from_ps(app_id: int, payload: bytes) -> tuple[int, bytes]:
    return JOB_PORTS[app_id][1], build_frame(ps_endpoint(app_id), SWITCH_ADDRESS, payload)


def result(app_id: int, seq: int, agtr: int, values: np.ndarray, flags: int = params.FLAG_ACK, n: int = N) -> tuple[int, bytes]:
    return from_ps(app_id, encode_payload(ATPHeader((1 << n) - 1, n, flags, app_id, seq, agtr, params.NO_INDEX), values))


def decode(frame: bytes) -> tuple[ATPHeader, np.ndarray]:
    decoded = decode_payload(frame[ATP_OFFSET:], K)
    assert decoded is not None
    return decoded


def complete(switch: ATPSwitch, app_id: int, seq: int, agtr: int, seeds: tuple[int, ...]) -> list[tuple[int, bytes]]:
    out = []
    for w, seed in enumerate(seeds):
        out += switch.process(*update(app_id, w, seq, agtr, vals(seed)))
    return out


# 1
def test_n_contributions_make_a_full_sum_to_the_ps_whose_result_frees_and_multicasts(switch: ATPSwitch) -> None:
    assert complete(switch, 1, 1, 5, (1, 2)) == []
    assert owner(switch, 5) == (1, 1)
    [(port, frame)] = switch.process(*update(1, 2, 1, 5, vals(3)))
    header, values = decode(frame)
    assert port == 3 and header.bitmap == 0b111 and header.flags == 0
    assert np.array_equal(values, vals(1) + vals(2) + vals(3))
    assert owner(switch, 5) == (1, 1), "held until the PS's result"
    copies = switch.process(*result(1, 1, 5, values))
    assert [port for port, _ in copies] == [0, 1, 2]
    for w, (_, copy) in enumerate(copies):
        assert copy[IPV4_OFFSET + 16:IPV4_OFFSET + 20] == bytes(int(b) for b in worker_endpoint(1, w).ipv4.split("."))
        assert np.array_equal(decode(copy)[1], values) and decode(copy)[0].flags & params.FLAG_ACK
    assert owner(switch, 5) == (0, 0) and register(switch, "bitmap", 5) == 0 and register(switch, "count", 5) == 0
    assert ingress_events(switch) == {"EV_AGGREGATED": 2, "EV_FULL_TO_PS": 1, "EV_RESULT_FREED": 1}


# 2
def test_the_next_sequence_on_a_freed_aggregator_claims_it_and_overwrites_the_old_sums(switch: ATPSwitch) -> None:
    [(_, frame)] = complete(switch, 1, 1, 5, (1, 2, 3))
    switch.process(*result(1, 1, 5, decode(frame)[1]))
    [(_, frame)] = complete(switch, 1, 2, 5, (4, 5, 6))
    assert np.array_equal(decode(frame)[1], vals(4) + vals(5) + vals(6))
    assert "EV_COLLISION_TO_PS" not in ingress_events(switch)


# 3a
def test_another_job_on_a_taken_aggregator_is_tagged_and_goes_to_its_own_ps(switch: ATPSwitch) -> None:
    switch.process(*update(1, 0, 1, 5, vals(1)))
    [(out_port, out)] = switch.process(*update(2, 0, 1, 5, vals(2)))
    header, values = decode(out)
    assert out_port == 7 and header.flags == params.FLAG_COLLISION and np.array_equal(values, vals(2))
    assert owner(switch, 5) == (1, 1) and register(switch, "bitmap", 5) == 0b001
    assert np.array_equal(aggregator_values(switch, 5, K), vals(1)), "the other job's values never enter"


# 3b
def test_the_ps_sums_a_collided_sequence_and_the_workers_adopt_the_new_index_it_names(switch: ATPSwitch) -> None:
    cores = [WorkerCore(WorkerConfig(2, w, N, K), AggregatorMap(2, 2, POOL), vals(10 + w), 1, 0.0) for w in range(N)]
    taken = AggregatorMap(2, 2, POOL).index(0)
    switch.process(*update(1, 0, 1, taken, vals(1)))  # job 1 holds job 2's first index
    ps = ParameterServerCore(2, N, K, POOL)
    results = []
    for w, core in enumerate(cores):
        for payload in core.start(0.0):
            for port, frame in switch.process(JOB_PORTS[2][0][w], build_frame(worker_endpoint(2, w), ps_endpoint(2), payload)):
                assert port == 7
                results += ps.receive(frame[ATP_OFFSET:])
    [collided] = [r for r in results if decode_payload(r, K)[0].flags & params.FLAG_COLLISION]
    new_index = decode_payload(collided, K)[0].new_agtr
    assert new_index not in (taken, params.NO_INDEX) and ps.stats.collided_sequences == 1
    for payload in results:
        for port, frame in switch.process(*from_ps(2, payload)):
            cores[JOB_PORTS[2][0].index(port)].receive(frame[ATP_OFFSET:], 0.001)
    expected = vals(10) + vals(11) + vals(12)
    for core in cores:
        assert core.finished and np.array_equal(core.result, expected)
        assert core.stats.collisions_adopted == 1 and core._map.index(0) == new_index
    assert owner(switch, taken) == (1, 1), "job 2's result freed nothing of job 1's"


# 4
def test_a_duplicate_before_completion_is_dropped_and_counted_once(switch: ATPSwitch) -> None:
    switch.process(*update(1, 0, 1, 5, vals(1)))
    assert switch.process(*update(1, 0, 1, 5, vals(1))) == []
    [(_, frame)] = switch.process(*update(1, 1, 1, 5, vals(2))) + switch.process(*update(1, 2, 1, 5, vals(3)))
    assert np.array_equal(decode(frame)[1], vals(1) + vals(2) + vals(3))
    assert ingress_events(switch)["EV_DUPLICATE_DROPPED"] == 1


# 5
def test_a_duplicate_after_completion_goes_to_the_ps_again_with_the_stored_sums(switch: ATPSwitch) -> None:
    [(_, first)] = complete(switch, 1, 1, 5, (1, 2, 3))
    [(port, again)] = switch.process(*update(1, 1, 1, 5, vals(2)))
    assert port == 3 and again[ATP_OFFSET:] == first[ATP_OFFSET:]
    assert ingress_events(switch)["EV_DUPLICATE_TO_PS"] == 1


# 6
def test_a_resend_flushes_the_partial_sum_to_the_ps_and_frees_the_aggregator(switch: ATPSwitch) -> None:
    switch.process(*update(1, 0, 1, 5, vals(1)))
    [(port, frame)] = switch.process(*update(1, 2, 1, 5, vals(3), params.FLAG_RESEND))
    header, values = decode(frame)
    assert port == 3 and header.bitmap == 0b101 and header.flags == params.FLAG_RESEND
    assert np.array_equal(values, vals(1) + vals(3))
    assert owner(switch, 5) == (0, 0) and register(switch, "count", 5) == 0
    assert switch.process(*update(1, 1, 1, 5, vals(2))) == [], "the next packet claims it afresh"
    assert owner(switch, 5) == (1, 1) and register(switch, "bitmap", 5) == 0b010
    assert np.array_equal(aggregator_values(switch, 5, K), vals(2))
    assert ingress_events(switch)["EV_RESEND_FLUSHED"] == 1


# 7
def test_a_resend_on_someone_elses_aggregator_passes_through_untagged(switch: ATPSwitch) -> None:
    switch.process(*update(1, 0, 1, 5, vals(1)))
    for app_id, seq in ((2, 1), (1, 2)):  # another job, another sequence
        port, frame = update(app_id, 1, seq, 5, vals(2), params.FLAG_RESEND)
        [(out_port, out)] = switch.process(port, frame)
        assert out_port == JOB_PORTS[app_id][1] and out == frame, "unchanged, not tagged as a collision"
    assert owner(switch, 5) == (1, 1) and register(switch, "bitmap", 5) == 0b001
    assert ingress_events(switch)["EV_RESEND_PASSED"] == 2


# 8
def test_a_lost_result_ends_in_a_timeout_resend_answered_from_the_stored_result(switch: ATPSwitch) -> None:
    lost: list[bytes] = []

    def lose_first_result(hop: str, payload: bytes) -> bool:
        if hop == "ps->switch" and not lost:
            lost.append(payload)
            return True
        return False

    net = ATPNetwork(K, POOL, Faults(lose=lose_first_result), switch=switch)
    tensors = [vals(w) for w in range(N)]
    job = net.add_job(1, tensors, positions=1)
    assert (job.worker_ports, job.ps_port) == tuple(JOB_PORTS[1]), "the switch is programmed for these ports"
    net.run()
    for core in job.workers:
        assert core.finished and np.array_equal(core.result, sum(tensors))
        assert core.stats.resends_timeout == 1
    assert job.ps.stats.results_repeated >= 1 and job.ps.stats.sequences_from_switch == 1
    counted = ingress_events(switch)
    assert counted["EV_RESEND_FLUSHED"] == 1, "the first resend flushes the held full sum"
    assert counted["EV_RESULT_NOT_OWNER"] >= 1, "the repeated result finds the aggregator already freed"


# 10
def test_a_result_that_does_not_own_the_aggregator_frees_nothing_but_still_reaches_the_workers(switch: ATPSwitch) -> None:
    switch.process(*update(1, 0, 5, 5, vals(1)))
    assert len(switch.process(*result(1, 4, 5, vals(9)))) == N
    assert owner(switch, 5) == (1, 5) and register(switch, "bitmap", 5) == 0b001
    assert ingress_events(switch)["EV_RESULT_NOT_OWNER"] == 1


# 11
def test_ecn_on_one_contribution_reaches_every_worker_and_halves_its_window(switch: ATPSwitch) -> None:
    positions = 4
    cores = [WorkerCore(WorkerConfig(1, w, N, K), AggregatorMap(1, positions, POOL), vals(w), 1, 0.0) for w in range(N)]
    ps = ParameterServerCore(1, N, K, POOL)
    results = []
    for w, core in enumerate(cores):
        [payload] = core.start(0.0)
        if w == 1:  # marked by a switch upstream
            payload = payload[:5] + bytes([payload[5] | params.FLAG_ECN]) + payload[6:]
        for _, frame in switch.process(JOB_PORTS[1][0][w], build_frame(worker_endpoint(1, w), ps_endpoint(1), payload)):
            assert decode(frame)[0].flags & params.FLAG_ECN
            results += ps.receive(frame[ATP_OFFSET:])
    [payload] = results
    for port, frame in switch.process(*from_ps(1, payload)):
        assert decode(frame)[0].flags & params.FLAG_ECN
        cores[port].receive(frame[ATP_OFFSET:], 0.001)
    for core in cores:
        assert core.finished and core.cwnd == positions / 2 and core.stats.window_halvings == 1


# 12
def test_overflow_packets_pass_through_to_the_ps_untouched(switch: ATPSwitch) -> None:
    port, frame = update(1, 0, 1, 5, vals(1), params.FLAG_OVERFLOW)
    assert switch.process(port, frame) == [(3, frame)]
    assert owner(switch, 5) == (0, 0) and register(switch, "bitmap", 5) == 0
    assert ingress_events(switch) == {"EV_OVERFLOW_TO_PS": 1}


# 13
def test_other_traffic_is_forwarded_by_l2(switch: ATPSwitch) -> None:
    known = worker_endpoint(1, 1)
    switch.control.table_add(programming.L2_TABLE, "l2_forward", [known.mac], [1])
    frame = build_frame(worker_endpoint(1, 0), Endpoint(known.mac, known.ipv4, 0xBEE0), b"SwitchML's port is not ATP's")
    assert switch.process(0, frame) == [(1, frame)]
    stranger = build_frame(worker_endpoint(1, 0), Endpoint("02:00:00:00:99:99", "10.9.9.9", 53), b"?")
    assert switch.process(0, stranger) == [(port, stranger) for port in ALL_PORTS if port != 0]
    assert ingress_events(switch) == {"EV_FORWARDED": 2}
    assert egress_packets(switch) == [1 + len(ALL_PORTS) - 1, 0]


def test_packets_the_switch_cannot_trust_are_counted_and_change_nothing(switch: ATPSwitch) -> None:
    port, frame = update(1, 0, 1, 5, vals(1))
    worker, ps = worker_endpoint(1, 0), ps_endpoint(1)

    def sent(source: Endpoint, bitmap: int, flags: int, app_id: int) -> bytes:
        return build_frame(source, ps, encode_payload(ATPHeader(bitmap, N, flags, app_id, 1, 5, params.NO_INDEX), vals(1)))

    stranger = Endpoint("02:00:00:00:99:99", "10.9.9.9", 1)
    cases = {
        "EV_DROP_MALFORMED": [(port, frame[:-1]), update(1, 0, 1, POOL, vals(1)), update(1, 0, 0, 5, vals(1))],
        "EV_DROP_UNKNOWN_SENDER": [(port, sent(stranger, 1, 0, 1)), (5, frame)],
        "EV_DROP_WRONG_JOB": [
            (port, sent(worker, 0b001, params.FLAG_ACK, 1)),  # a worker posing as the PS
            (port, sent(worker, 0b001, 0, 2)),  # a worker writing into another job
            (port, sent(worker, 0b010, 0, 1)),  # a worker sending another worker's bit
            (3, sent(ps, 0b111, params.FLAG_ACK, 2)),  # a PS answering for another job
            (3, sent(ps, 0b111, 0, 1)),  # a PS sending something other than a result
        ],
    }
    for name, frames in cases.items():
        for in_port, bad in frames:
            assert switch.process(in_port, bad) == [], name
        assert ingress_events(switch).get(name) == len(frames), name
    assert not any(switch.control.register_read("ATPIngress.owner_seq")) and not any(switch.control.register_read("ATPIngress.bitmap"))


def test_one_worker_jobs_sum_without_the_reference_codes_stale_values(switch: ATPSwitch) -> None:
    for seq, seed in ((1, 1), (2, 2)):
        [(port, frame)] = switch.process(*update(3, 0, seq, 5, vals(seed), n=1))
        assert port == 1 and np.array_equal(decode(frame)[1], vals(seed))
        switch.process(*result(3, seq, 5, vals(seed), n=1))
        assert owner(switch, 5) == (0, 0)
    assert ingress_events(switch) == {"EV_FULL_TO_PS": 2, "EV_RESULT_FREED": 2}

