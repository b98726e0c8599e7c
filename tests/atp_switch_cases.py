"""The behaviour cases of atp-protocol.md that involve ATP's switch, written once for every target
(numbered in comments).

``SwitchCases`` holds them; each target's test module subclasses it (``class
TestSwitchCases(SwitchCases)``: pytest collects the inherited cases there) and gives its
``switch`` fixture, an ``ATPSwitchDriver`` (tests/atp_switch_driver.py) programmed by
``program``: the flood group of ALL_PORTS and two jobs, job 1 on ports 0-2 with its PS on 3,
job 2 on ports 4-6 with its PS on 7, with fresh aggregators and counters.
tests/test_atp_switch.py runs them on the embedded pipeline, tests/test_atp_bmv2.py on bmv2,
tests/test_atp_ebpf.py on the eBPF program. Frames are crafted with protocol/atp/packet.py;
where a case spans the hosts (a collision's new index, a lost result, ECN halving the window),
the PS and worker cores of hosts/atp take the switch's output. The cases about the hosts alone
(9: the PS's bitmap check) and the embedded pipeline's own queue hook stay in
tests/test_atp_switch.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from atp_network import ps_endpoint, worker_endpoint
from atp_switch_driver import ATPSwitchDriver
from hosts.atp.aggregators import AggregatorMap
from hosts.atp.parameter_server import ParameterServerCore
from hosts.atp.worker import WorkerConfig, WorkerCore
from protocol.atp import params
from protocol.atp.packet import ATP_OFFSET, ATPHeader, decode_payload, encode_payload
from protocol.packet import IPV4_OFFSET, UDP_OFFSET, Endpoint, build_frame, ipv4_to_bytes, mac_to_bytes

K, N, POOL = 32, 3, 16
"""K is SwitchML's smallest k, which every target builds."""
JOB_PORTS = {1: ([0, 1, 2], 3), 2: ([4, 5, 6], 7)}
ALL_PORTS = list(range(8))
SWITCH_ADDRESS = Endpoint("02:53:4d:4c:00:01", "10.0.0.254", params.SWITCH_UDP_PORT)
"""Where a PS sends its results: the switch's address (the switch reads only ATP's port)."""


def program(switch: ATPSwitchDriver) -> ATPSwitchDriver:
    """What the control plane installs for the cases: the flood group and both jobs of JOB_PORTS."""
    switch.program_flood(ALL_PORTS)
    for app_id, (workers, ps) in JOB_PORTS.items():
        switch.program_job(app_id, workers, ps)
    return switch


def vals(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-(2**20), 2**20, K).astype(np.int32)


def update(app_id: int, w: int, seq: int, agtr: int, values: np.ndarray, flags: int = 0) -> tuple[int, bytes]:
    """Worker w of job app_id's packet, as it enters the switch (port, frame)."""
    payload = encode_payload(ATPHeader(1 << w, N, flags, app_id, seq, agtr, params.NO_INDEX), values)
    return JOB_PORTS[app_id][0][w], build_frame(worker_endpoint(app_id, w), ps_endpoint(app_id), payload)


def from_ps(app_id: int, payload: bytes) -> tuple[int, bytes]:
    return JOB_PORTS[app_id][1], build_frame(ps_endpoint(app_id), SWITCH_ADDRESS, payload)


def result(app_id: int, seq: int, agtr: int, values: np.ndarray, flags: int = params.FLAG_ACK) -> tuple[int, bytes]:
    return from_ps(app_id, encode_payload(ATPHeader((1 << N) - 1, N, flags, app_id, seq, agtr, params.NO_INDEX), values))


def decode(frame: bytes) -> tuple[ATPHeader, np.ndarray]:
    decoded = decode_payload(frame[ATP_OFFSET:], K)
    assert decoded is not None
    return decoded


def complete(switch: ATPSwitchDriver, app_id: int, seq: int, agtr: int, seeds: tuple[int, ...]) -> list[tuple[int, bytes]]:
    out = []
    for w, seed in enumerate(seeds):
        out += switch.process(*update(app_id, w, seq, agtr, vals(seed)))
    return out


class SwitchCases:
    """Every case that drives a switch; a target's module collects them by subclassing."""

    # 1
    def test_n_contributions_make_a_full_sum_to_the_ps_whose_result_frees_and_multicasts(self, switch: ATPSwitchDriver) -> None:
        assert complete(switch, 1, 1, 5, (1, 2)) == []
        assert switch.owner(5) == (1, 1)
        [(port, frame)] = switch.process(*update(1, 2, 1, 5, vals(3)))
        header, values = decode(frame)
        assert port == 3 and header.bitmap == 0b111 and header.flags == 0
        assert np.array_equal(values, vals(1) + vals(2) + vals(3))
        assert switch.owner(5) == (1, 1), "held until the PS's result"
        copies = switch.process(*result(1, 1, 5, values))
        assert [port for port, _ in copies] == [0, 1, 2]
        for w, (_, copy) in enumerate(copies):
            worker = worker_endpoint(1, w)
            assert (copy[:6], copy[IPV4_OFFSET + 16:IPV4_OFFSET + 20]) == (mac_to_bytes(worker.mac), ipv4_to_bytes(worker.ipv4))
            assert int.from_bytes(copy[UDP_OFFSET + 2:UDP_OFFSET + 4], "big") == worker.udp_port, "worker_addr_table's address"
            assert np.array_equal(decode(copy)[1], values) and decode(copy)[0].flags & params.FLAG_ACK
        assert switch.owner(5) == (0, 0) and switch.cell("bitmap", 5) == 0 and switch.cell("count", 5) == 0
        assert switch.events() == {"EV_AGGREGATED": 2, "EV_FULL_TO_PS": 1, "EV_RESULT_FREED": 1}

    # 2
    def test_the_next_sequence_on_a_freed_aggregator_claims_it_and_overwrites_the_old_sums(self, switch: ATPSwitchDriver) -> None:
        [(_, frame)] = complete(switch, 1, 1, 5, (1, 2, 3))
        switch.process(*result(1, 1, 5, decode(frame)[1]))
        [(_, frame)] = complete(switch, 1, 2, 5, (4, 5, 6))
        assert np.array_equal(decode(frame)[1], vals(4) + vals(5) + vals(6))
        assert "EV_COLLISION_TO_PS" not in switch.events()

    # 3a
    def test_another_job_on_a_taken_aggregator_is_tagged_and_goes_to_its_own_ps(self, switch: ATPSwitchDriver) -> None:
        switch.process(*update(1, 0, 1, 5, vals(1)))
        port, frame = update(2, 0, 1, 5, vals(2))
        [(out_port, out)] = switch.process(port, frame)
        header, values = decode(out)
        assert out_port == 7 and header.flags == params.FLAG_COLLISION and np.array_equal(values, vals(2))
        assert switch.owner(5) == (1, 1) and switch.cell("bitmap", 5) == 0b001
        assert np.array_equal(switch.values(5), vals(1)), "the other job's values never enter"

    # 3b
    def test_the_ps_sums_a_collided_sequence_and_the_workers_adopt_the_new_index_it_names(self, switch: ATPSwitchDriver) -> None:
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
        assert switch.owner(taken) == (1, 1), "job 2's result freed nothing of job 1's"

    # 4
    def test_a_duplicate_before_completion_is_dropped_and_counted_once(self, switch: ATPSwitchDriver) -> None:
        switch.process(*update(1, 0, 1, 5, vals(1)))
        assert switch.process(*update(1, 0, 1, 5, vals(1))) == []
        [(_, frame)] = switch.process(*update(1, 1, 1, 5, vals(2))) + switch.process(*update(1, 2, 1, 5, vals(3)))
        assert np.array_equal(decode(frame)[1], vals(1) + vals(2) + vals(3))
        assert switch.events()["EV_DUPLICATE_DROPPED"] == 1

    # 5
    def test_a_duplicate_after_completion_goes_to_the_ps_again_with_the_stored_sums(self, switch: ATPSwitchDriver) -> None:
        [(_, first)] = complete(switch, 1, 1, 5, (1, 2, 3))
        [(port, again)] = switch.process(*update(1, 1, 1, 5, vals(2)))
        assert port == 3 and again[ATP_OFFSET:] == first[ATP_OFFSET:]
        assert switch.events()["EV_DUPLICATE_TO_PS"] == 1

    # 6
    def test_a_resend_flushes_the_partial_sum_to_the_ps_and_frees_the_aggregator(self, switch: ATPSwitchDriver) -> None:
        switch.process(*update(1, 0, 1, 5, vals(1)))
        [(port, frame)] = switch.process(*update(1, 2, 1, 5, vals(3), params.FLAG_RESEND))
        header, values = decode(frame)
        assert port == 3 and header.bitmap == 0b101 and header.flags == params.FLAG_RESEND
        assert np.array_equal(values, vals(1) + vals(3))
        assert switch.owner(5) == (0, 0) and switch.cell("count", 5) == 0
        assert switch.process(*update(1, 1, 1, 5, vals(2))) == [], "the next packet claims it afresh"
        assert switch.owner(5) == (1, 1) and switch.cell("bitmap", 5) == 0b010
        assert np.array_equal(switch.values(5), vals(2))
        assert switch.events()["EV_RESEND_FLUSHED"] == 1

    # 7
    @pytest.mark.parametrize("app_id, seq", [(2, 1), (1, 2)], ids=["another job", "another sequence"])
    def test_a_resend_on_someone_elses_aggregator_passes_through_untagged(self, switch: ATPSwitchDriver, app_id: int, seq: int) -> None:
        switch.process(*update(1, 0, 1, 5, vals(1)))
        port, frame = update(app_id, 1, seq, 5, vals(2), params.FLAG_RESEND)
        [(out_port, out)] = switch.process(port, frame)
        assert out_port == JOB_PORTS[app_id][1] and out == frame, "unchanged, not tagged as a collision"
        assert switch.owner(5) == (1, 1) and switch.cell("bitmap", 5) == 0b001
        assert switch.events()["EV_RESEND_PASSED"] == 1

    # 8, frame by frame through the switch (so that it runs on every target)
    def test_a_lost_result_is_answered_after_the_timeout_resend_flushed_the_held_sum(self, switch: ATPSwitchDriver) -> None:
        cores = [WorkerCore(WorkerConfig(1, w, N, K), AggregatorMap(1, 1, POOL), vals(w), 1, 0.0) for w in range(N)]
        ps = ParameterServerCore(1, N, K, POOL)
        lost: list[bytes] = []

        def deliver(sent: list[tuple[int, bytes]], now: float) -> None:
            """Every frame through the switch, the PS and the workers until nothing is left to send;
            the PS's first result is lost on its way to the switch."""
            while sent:
                for port, frame in switch.process(*sent.pop(0)):
                    if port == JOB_PORTS[1][1]:
                        for payload in ps.receive(frame[ATP_OFFSET:]):
                            if lost:
                                sent.append(from_ps(1, payload))
                            else:
                                lost.append(payload)
                    else:
                        sent += [(port, build_frame(worker_endpoint(1, port), ps_endpoint(1), payload))
                                 for payload in cores[port].receive(frame[ATP_OFFSET:], now)]

        deliver([(w, build_frame(worker_endpoint(1, w), ps_endpoint(1), payload)) for w, core in enumerate(cores)
                 for payload in core.start(0.0)], 0.0)
        assert lost and not any(core.finished for core in cores) and switch.owner(cores[0]._map.index(0)) == (1, 1)
        now = max(core.next_timer() for core in cores)
        deliver([(w, build_frame(worker_endpoint(1, w), ps_endpoint(1), payload)) for w, core in enumerate(cores)
                 for payload in core.expire(now)], now)
        for core in cores:
            assert core.finished and np.array_equal(core.result, vals(0) + vals(1) + vals(2)) and core.stats.resends_timeout == 1
        counted = switch.events()
        assert counted["EV_RESEND_FLUSHED"] == 1, "the first resend flushes the held full sum; the others pass"
        assert counted["EV_RESEND_PASSED"] == N - 1 and counted["EV_RESULT_NOT_OWNER"] >= 1
        assert ps.stats.results_repeated >= 1 and switch.owner(cores[0]._map.index(0)) == (0, 0)

    # 10
    def test_a_result_that_does_not_own_the_aggregator_frees_nothing_but_still_reaches_the_workers(self, switch: ATPSwitchDriver) -> None:
        switch.process(*update(1, 0, 5, 5, vals(1)))
        assert len(switch.process(*result(1, 4, 5, vals(9)))) == N
        assert switch.owner(5) == (1, 5) and switch.cell("bitmap", 5) == 0b001
        assert switch.events()["EV_RESULT_NOT_OWNER"] == 1

    # 11
    def test_ecn_on_one_contribution_reaches_every_worker_and_halves_its_window(self, switch: ATPSwitchDriver) -> None:
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
    def test_overflow_packets_pass_through_to_the_ps_untouched(self, switch: ATPSwitchDriver) -> None:
        port, frame = update(1, 0, 1, 5, vals(1), params.FLAG_OVERFLOW)
        assert switch.process(port, frame) == [(3, frame)]
        assert switch.owner(5) == (0, 0) and switch.cell("bitmap", 5) == 0
        assert switch.events() == {"EV_OVERFLOW_TO_PS": 1}

    # 13
    def test_the_drop_simulator_loses_frames_on_arrival_or_copies_on_the_way_out(self, switch: ATPSwitchDriver) -> None:
        """Not a case of atp-protocol.md: the loss a network without netem emulates. At
        probability 1 on ingress a worker's packet is lost before anything sees it (its
        aggregator stays free); on egress every copy of a PS result is lost while the ingress
        did its work (the aggregator is freed); each counted under SwitchML's names. Back at
        0, nothing is lost."""
        assert switch.process_lossy(*update(1, 0, 1, 5, vals(0)), (1.0, 0.0), 0) == []
        assert switch.owner(5) == (0, 0)
        assert switch.process(*update(1, 0, 1, 5, vals(0))) == []
        assert switch.owner(5) == (1, 1)
        assert switch.process_lossy(*result(1, 1, 5, vals(1)), (0.0, 1.0), N) == []
        assert switch.owner(5) == (0, 0)
        assert switch.events() == {"EV_DROP_SIM_INGRESS": 1, "EV_AGGREGATED": 1, "EV_RESULT_FREED": 1}
        assert switch.egress_packets() == [0, 0, N]
        assert len(switch.process(*result(1, 1, 5, vals(1)))) == N
        assert switch.egress_packets() == [N, 0, N]

    def test_other_traffic_is_forwarded_by_l2(self, switch: ATPSwitchDriver) -> None:
        known = worker_endpoint(1, 1)
        switch.program_host(known.mac, 1)
        frame = build_frame(worker_endpoint(1, 0), Endpoint(known.mac, known.ipv4, 0xBEE0), b"SwitchML's port is not ATP's")
        assert switch.process(0, frame) == [(1, frame)]
        stranger = build_frame(worker_endpoint(1, 0), Endpoint("02:00:00:00:99:99", "10.9.9.9", 53), b"?")
        assert switch.process(0, stranger) == [(port, stranger) for port in ALL_PORTS if port != 0]
        assert switch.events() == {"EV_FORWARDED": 2}
        assert switch.egress_packets() == [1 + len(ALL_PORTS) - 1, 0, 0]

    def test_packets_the_switch_cannot_trust_are_counted_and_change_nothing(self, switch: ATPSwitchDriver) -> None:
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
            assert switch.events().get(name) == len(frames), name
        for register in ("ATPIngress.owner_seq", "ATPIngress.bitmap"):
            assert not any(switch.control.register_read(register)), register

    def test_one_worker_jobs_sum_without_the_reference_codes_stale_values(self, switch: ATPSwitchDriver) -> None:
        switch.program_job(3, [0], 1)  # beside jobs 1 and 2: its worker and PS differ by source address
        for seq, seed in ((1, 1), (2, 2)):
            payload = encode_payload(ATPHeader(1, 1, 0, 3, seq, 5, params.NO_INDEX), vals(seed))
            [(port, frame)] = switch.process(0, build_frame(worker_endpoint(3, 0), ps_endpoint(3), payload))
            assert port == 1 and np.array_equal(decode(frame)[1], vals(seed))
            switch.process(1, build_frame(ps_endpoint(3), worker_endpoint(3, 0), frame[ATP_OFFSET:ATP_OFFSET + 5]
                                          + bytes([params.FLAG_ACK]) + frame[ATP_OFFSET + 6:]))
            assert switch.owner(5) == (0, 0)
        assert switch.events() == {"EV_FULL_TO_PS": 2, "EV_RESULT_FREED": 2}
