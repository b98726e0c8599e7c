"""ATP's hosts: whole all-reduces through the in-memory network, and the cores on their own.

End to end (tests/atp_network.py): n worker cores, the embedded pipeline and the PS core,
with loss, duplicates and reordering on every hop, two jobs forced onto the same
aggregators, a real egress queue marking ECN. Every run must end with every worker holding
the exact integer sum protocol/atp/quantize.py says a correct job produces.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from atp_network import ATPNetwork, Faults
from hosts.atp.aggregators import AggregatorMap
from hosts.atp.job import WorkerJob
from hosts.atp.parameter_server import ParameterServerCore
from hosts.atp.worker import HOLD_MAX_S, HOLD_SHARE, ATPStalled, WorkerConfig, WorkerCore
from protocol.atp import params
from protocol.atp.job import ATPParameters
from protocol.atp.packet import ATPHeader, decode_payload, encode_payload
from protocol.atp.quantize import check_within, dequantize_sum, expected_sum, job_scale, quantize_tensor

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

K = 16


def tensors(seed: int, n: int, length: int, dtype: type = np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == np.int32:
        return [rng.integers(-(2**31), 2**31, length, dtype=np.int64).astype(np.int32) for _ in range(n)]
    return [rng.uniform(-1, 1, length).astype(np.float32) for _ in range(n)]


def assert_exact(job, inputs: list[np.ndarray], exponent: int = 0) -> None:
    expected = expected_sum(inputs, len(inputs), exponent)
    for core in job.workers:
        assert core.finished, f"worker {core.config.worker_id} of job {job.app_id} did not finish"
        assert np.array_equal(core.result, expected.int_sum)


def run_job(net: ATPNetwork, app_id: int, inputs: list[np.ndarray], **options):
    job = net.add_job(app_id, [quantize_tensor(x, 0, len(inputs)) for x in inputs], **options)
    return job


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_an_all_reduce_through_the_switch_is_exact(dtype: type) -> None:
    inputs = tensors(1, 4, 1000, dtype)
    net = ATPNetwork(K, 256)
    job = run_job(net, 1, inputs)
    net.run()
    assert_exact(job, inputs)
    assert job.ps.stats.sequences_from_switch == job.workers[0].n_packets, "no loss: every sum made in the switch"
    if dtype == np.float32:
        values = dequantize_sum(job.workers[0].result, 0, 4)
        assert np.array_equal(values, expected_sum(inputs, 4, 0).values)
        assert np.allclose(values, np.sum(inputs, axis=0), atol=1e-6)


def test_two_jobs_hashed_onto_the_same_aggregators_never_get_a_wrong_sum() -> None:
    positions = pool = 4  # each job's positions cover the whole pool: every aggregator is shared
    net = ATPNetwork(K, pool)
    first, second = tensors(2, 3, 600, np.int32), tensors(3, 3, 600, np.int32)
    jobs = [run_job(net, 1, first, positions=positions), run_job(net, 2, second, positions=positions)]
    assert set(jobs[0].workers[0]._map.indices) == set(jobs[1].workers[0]._map.indices) == set(range(pool))
    net.run()
    assert_exact(jobs[0], first)
    assert_exact(jobs[1], second)
    assert net.pipeline.ingress.event_counter.packets[params.EVENT["EV_COLLISION_TO_PS"]] > 0
    assert sum(job.ps.stats.sequences_from_parts for job in jobs) > 0, "collided sequences finished at the PS"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**16), n=st.integers(1, 5), length=st.integers(1, 300),
       loss=st.floats(0, 0.15), duplicate=st.floats(0, 0.2), reorder=st.floats(0, 0.3), shared=st.booleans())
def test_loss_duplicates_and_reordering_end_exact(seed: int, n: int, length: int, loss: float, duplicate: float,
                                                   reorder: float, shared: bool) -> None:
    net = ATPNetwork(K, 8 if shared else 64, Faults(seed, loss, duplicate, reorder))
    inputs = [tensors(seed, n, length), tensors(seed + 1, n, length, np.int32)]
    jobs = [run_job(net, app_id, x, positions=4) for app_id, x in enumerate(inputs, start=1)]
    net.run(until_s=60.0)
    for job, x in zip(jobs, inputs):
        assert_exact(job, x)


def test_the_ps_forgets_what_no_worker_can_still_ask_for_and_the_sum_stays_exact() -> None:
    """A long job under loss: the PS keeps about a window of results, not all 250 of them."""
    positions = 8
    net = ATPNetwork(K, 64, Faults(3, loss=0.03, duplicate=0.03, reorder=0.1))
    inputs = tensors(3, 3, 250 * K)
    job = run_job(net, 1, inputs, positions=positions)
    net.run(until_s=60.0)
    assert_exact(job, inputs)
    kept = len(job.ps._results)
    assert kept <= 2 * positions and job.ps.stats.forgotten >= 250 - kept


def one_loss(hop: str, seq: int):
    """A Faults.lose that drops the first frame of ``seq`` on ``hop``."""
    lost: list[bool] = []

    def lose(where: str, payload: bytes) -> bool:
        if where == hop and not lost and decode_payload(payload, K)[0].seq == seq:
            lost.append(True)
            return True
        return False

    return lose


@pytest.mark.parametrize("hop, seq, cause", [
    ("ps->switch", 10, "timeout"),  # the last result, lost before the switch: only the PS has the sum
    ("ps->switch", 2, "gap"),  # an earlier one: the results after it reveal the hole
    ("switch->worker", 10, "timeout"),  # one worker's copy of the last result
    ("worker->switch", 2, "gap"),  # a worker's packet
])
def test_a_lost_result_or_worker_packet_ends_exact(hop: str, seq: int, cause: str) -> None:
    net = ATPNetwork(K, 64, Faults(lose=one_loss(hop, seq)))
    inputs = tensors(4, 3, 10 * K)
    job = run_job(net, 1, inputs, positions=4, congestion_control=False)
    net.run()
    assert_exact(job, inputs)
    resends = [getattr(core.stats, f"resends_{cause}") for core in job.workers]
    assert sum(resends) >= 1


class StalledPS(Faults):
    """Every frame on its way to the PS from ``start`` for ``length`` seconds arrives when the
    stall ends, in order: the PS held up on a busy machine. Nothing is lost."""

    def __init__(self, net_clock, start: float, length: float) -> None:
        super().__init__()
        self.clock, self.start, self.length = net_clock, start, length

    def copies(self, hop: str, payload: bytes) -> list[float]:
        now = self.clock()
        return [self.start + self.length - now] if hop == "switch->ps" and self.start <= now < self.start + self.length else [0.0]


def test_a_stall_longer_than_the_resend_timeout_resends_two_packets_per_timeout_not_the_window() -> None:
    """Late is not lost: while the PS is held up for five resend timeouts, each worker resends
    at most the first and the last overdue packet per timeout, not its whole window, which the
    switch would pass to the PS (hosts/atp/README.md, "Timers")."""
    timeout, stall = 0.004, 0.010  # the timeout two window drains, as on shaped links (hosts/atp/job.py, resend_floor)
    net = ATPNetwork(K, 64, port_rate_bps=1e7)  # a frame 98 µs on a port: a window of 16 drains in 1.6 ms, the job in ~10 ms
    net.faults = StalledPS(lambda: net.now, 0.003, stall)
    inputs = tensors(6, 4, 100 * K)
    job = run_job(net, 1, inputs, positions=16, congestion_control=False, resend_timeout_s=timeout)
    net.run()
    assert_exact(job, inputs)
    for core in job.workers:  # resending every overdue packet: 195 each, and the job took 75 ms instead of 26
        assert core.stats.resends_timeout <= 2 * math.ceil(stall / timeout) + 2, f"worker {core.config.worker_id} resent its window"
    assert sum(core.stats.resends_timeout for core in job.workers) > 0, "the stall outlasted the timeout"


def test_a_timeouts_probe_reveals_the_lost_packets_before_it_as_a_gap() -> None:
    """A window's three results lost together: the timeout resends the first and the last, and
    the last one's result reveals the one between as a gap, without a second timeout."""
    lost = {1, 2, 3}

    def lose(hop: str, payload: bytes) -> bool:
        seq = decode_payload(payload, K)[0].seq
        if hop == "ps->switch" and seq in lost:
            lost.discard(seq)
            return True
        return False

    net = ATPNetwork(K, 64, Faults(lose=lose))
    inputs = tensors(7, 3, 3 * K)
    job = run_job(net, 1, inputs, positions=4, congestion_control=False)
    net.run()
    assert_exact(job, inputs)
    for core in job.workers:
        assert (core.stats.resends_timeout, core.stats.resends_gap) == (2, 1)


def test_ecn_from_the_egress_queue_halves_the_window_and_the_sum_stays_exact() -> None:
    net = ATPNetwork(K, 256, port_rate_bps=1e8)
    net.pipeline.egress.ecn_threshold.cells[0] = 3
    inputs = tensors(5, 4, 200 * K)
    job = run_job(net, 1, inputs, positions=32)
    net.run()
    assert_exact(job, inputs)
    for core in job.workers:
        assert core.stats.ecn_results > 0 and core.stats.window_halvings > 0
        assert min(core.stats.cwnd) < 32 / 2


def test_with_congestion_control_off_ecn_leaves_the_window_alone() -> None:
    net = ATPNetwork(K, 256, port_rate_bps=1e8)
    net.pipeline.egress.ecn_threshold.cells[0] = 3
    inputs = tensors(5, 4, 200 * K)
    job = run_job(net, 1, inputs, positions=32, congestion_control=False)
    net.run()
    assert_exact(job, inputs)
    for core in job.workers:
        assert core.stats.ecn_results > 0, "marked all the same"
        assert core.stats.window_halvings == 0 and core.stats.cwnd == [] and core.window == 32


# -- the cores on their own -------------------------------------------------------------------

def worker(packets: int = 3, positions: int = 4, **config) -> WorkerCore:
    values = np.arange(packets * K, dtype=np.int32)
    return WorkerCore(WorkerConfig(1, 0, 2, K, **config), AggregatorMap(1, positions, 64), values, 100, 0.0)


def ack(seq: int, flags: int = 0, new_agtr: int = params.NO_INDEX) -> bytes:
    return encode_payload(ATPHeader(0b11, 2, params.FLAG_ACK | flags, 1, seq, 0, new_agtr), np.full(K, seq, np.int32))


def headers(payloads: list[bytes]) -> list[ATPHeader]:
    return [decode_payload(p, K)[0] for p in payloads]


def test_a_result_beyond_a_hole_resends_the_hole_once() -> None:
    core = worker()
    assert [h.seq for h in headers(core.start(0.0))] == [100, 101, 102]
    resent = headers(core.receive(ack(102), 0.001))
    assert [(h.seq, h.flags) for h in resent] == [(100, params.FLAG_RESEND), (101, params.FLAG_RESEND)]
    assert core.receive(ack(102), 0.001) == [] and core.stats.duplicates == 1
    assert core.stats.resends_gap == 2


def test_overdue_packets_are_resent_on_timeout_and_a_stall_is_an_error() -> None:
    core = worker(resend_timeout_s=0.01, stall_s=1.0)
    core.start(0.0)
    core.receive(ack(100), 0.001)
    assert core.next_timer() == pytest.approx(0.01)
    assert core.expire(0.005) == []
    assert [h.seq for h in headers(core.expire(0.01))] == [101, 102]
    assert core.stats.resends_timeout == 2
    with pytest.raises(ATPStalled, match="no result for 1 s, 2 packets missing"):
        core.expire(1.5)


def test_a_float_job_quantizes_each_packet_as_it_is_sent_and_dequantizes_each_result_as_it_arrives() -> None:
    """The float tensor is quantized packet by packet and rebuilt result by result, not in
    passes over the whole tensor before the first packet and after the last result, which held
    every worker sharing the cores for tens of milliseconds at both ends of the job
    (benchmarks/README.md, "ATP's ends")."""
    x = np.linspace(-200, 200, 3 * K, dtype=np.float32)
    core = WorkerCore(WorkerConfig(1, 0, 2, K), AggregatorMap(1, 4, 64), x, 100, 0.0, job_scale(8, 2))
    sent = [decode_payload(p, K)[1] for p in core.start(0.0)]
    assert np.array_equal(np.concatenate(sent), quantize_tensor(x, 8, 2)), "each packet quantized as it is sent"
    core.receive(ack(101), 0.001)
    assert not core.finished
    assert np.array_equal(core.values[K:2 * K], dequantize_sum(np.full(K, 101, np.int32), 8, 2)), "the result's chunk, at once"
    assert not core.values[:K].any() and not core.values[2 * K:].any()
    assert worker().values is None, "an int32 job has nothing to dequantize"


def test_before_its_first_result_a_worker_waits_the_first_resend_timeout() -> None:
    """Workers released together start apart: until the all-reduce's first result, a packet waits
    at least first_resend_timeout_s before it is resent, not the (shorter) resend timeout that
    applies once results come."""
    core = worker(resend_timeout_s=0.01, stall_s=1.0, first_resend_timeout_s=0.05)
    core.start(0.0)
    assert core.next_timer() == pytest.approx(0.05)
    assert core.expire(0.04) == [] and core.stats.resends_timeout == 0
    assert [h.seq for h in headers(core.expire(0.05))] == [100, 102], "the first and the last overdue"
    core.receive(ack(100), 0.06)
    assert core.next_timer() == pytest.approx(0.06), "once a result came, the resend timeout"
    assert [h.seq for h in headers(core.expire(0.061))] == [101, 102]


def test_after_a_small_batch_on_a_shaped_link_the_loop_holds_a_share_of_the_windows_time_on_the_link() -> None:
    """So that one wake-up takes several results (hosts/atp/README.md, "The native worker"): a
    hold of HOLD_SHARE of the window's time on the link, at most HOLD_MAX_S, never on an
    unshaped link, after most of a window, or with less than a window left to send."""
    frame_s = 0.0003
    core = worker(packets=20, positions=8, frame_s=frame_s)
    core.start(0.0)
    assert core.hold_s(1) == pytest.approx(HOLD_SHARE * 8 * frame_s)
    assert core.hold_s(8) == 0.0, "a whole window of results: the worker's CPU, not the link, sets the pace"
    assert worker(packets=20, positions=8).hold_s(1) == 0.0, "links not shaped"
    assert worker(packets=20, positions=64, frame_s=frame_s).hold_s(1) == 0.0, "less than a window left to send"
    assert worker(packets=200, positions=64, frame_s=0.001).hold_s(1) == HOLD_MAX_S
    core.cwnd = 2.0
    assert core.hold_s(1) == pytest.approx(HOLD_SHARE * 2 * frame_s), "the window AIMD left, not W"


def test_a_job_copies_no_tensor_at_either_end() -> None:
    """The core sends from the caller's tensor when it divides into whole packets, and the job
    hands back the finished core's own sum: copies of the whole tensor at either end of an
    all-reduce held eight workers sharing two cores for tens of milliseconds (benchmarks/README.md,
    "ATP's timeouts and wake-ups"). A tensor with a partial last packet is copied, padded."""
    parameters = ATPParameters(k=K, pool_size=64, job_id=1, window=4, exponent=8, resend_timeout_ms=5.0,
                               congestion_control=False, ecn_threshold=0)
    job = WorkerJob(parameters, 0, 1, 10.0)
    for tensor in (np.arange(3 * K, dtype=np.int32), np.linspace(-1, 1, 3 * K, dtype=np.float32)):
        core = job.begin(tensor, 0.0)
        assert np.shares_memory(core._chunks, tensor), "sent from the tensor itself"
        for payload in core.start(0.0):
            header, values = decode_payload(payload, K)
            core.receive(encode_payload(ATPHeader(1, 1, params.FLAG_ACK, 1, header.seq, 0, params.NO_INDEX), values), 0.001)
        values, int_sum = job.values(tensor, core)
        assert core.finished and np.shares_memory(int_sum, core._sums), "the core's own sum"
        assert np.array_equal(int_sum, quantize_tensor(tensor, 8, 1) if tensor.dtype == np.float32 else tensor)
    ragged = np.arange(3 * K - 1, dtype=np.int32)
    assert not np.shares_memory(job.begin(ragged, 0.0)._chunks, ragged), "a partial last packet: padded in a copy"


def test_the_window_never_exceeds_the_positions_and_slides_with_results() -> None:
    core = worker(packets=10, positions=4)
    assert len(core.start(0.0)) == 4
    [following] = headers(core.receive(ack(100), 0.001))
    assert following.seq == 104 and following.agtr == core._map.index(0), "p and p + W share the aggregator"


def test_a_collision_result_re_points_the_position_for_the_jobs_later_sequences() -> None:
    core = worker(packets=10, positions=4)
    core.start(0.0)
    taken = set(core._map.indices)
    fresh = next(i for i in range(64) if i not in taken)
    [following] = headers(core.receive(ack(100, params.FLAG_COLLISION, fresh), 0.001))
    assert following.agtr == fresh and core.stats.collisions_adopted == 1
    core.receive(ack(101, params.FLAG_COLLISION, fresh), 0.001)  # held by position 0 now: refused
    assert core._map.indices.count(fresh) == 1 and core.stats.collisions_adopted == 1


def test_aggregator_indices_are_unique_within_a_job_and_the_same_for_its_workers() -> None:
    maps = [AggregatorMap(7, 50, 64) for _ in range(2)]
    assert maps[0].indices == maps[1].indices and len(set(maps[0].indices)) == 50
    assert AggregatorMap(8, 50, 64).indices != maps[0].indices
    with pytest.raises(ValueError, match="window positions"):
        AggregatorMap(1, 65, 64)


@given(payload=st.binary(max_size=200))
def test_garbage_from_the_network_is_counted_never_raised(payload: bytes) -> None:
    core, ps = worker(), ParameterServerCore(1, 2, K, 64)
    core.start(0.0)
    core.receive(payload, 0.0)
    ps.receive(payload)
    assert core.stats.ignored + ps.stats.ignored == 2


def test_values_beyond_the_jobs_bound_are_refused_before_sending() -> None:
    with pytest.raises(ValueError, match=r"element 2 = -3.0: \|x\| > 2\^1"):
        check_within(np.array([0.5, 2.0, -3.0], np.float32), 1)
    with pytest.raises(ValueError, match="not finite"):
        quantize_tensor(np.array([np.nan], np.float32), 0, 2)


def test_aimd_halves_once_per_marked_window_and_adds_one_packet_per_clean_window() -> None:
    core = worker(packets=64, positions=8)
    sent = len(core.start(0.0))
    assert sent == 8 and core.window == 8
    seq = 100
    core.receive(ack(seq, params.FLAG_ECN), 0.001)  # the first window's results: one marked
    for seq in range(101, 108):
        core.receive(ack(seq), 0.001)
    assert core.stats.cwnd == [4.0], "halved once for the window, not once per mark"
    for seq in range(108, 112):  # the next window (4 packets), unmarked
        core.receive(ack(seq), 0.002)
    assert core.stats.cwnd == [4.0, 5.0] and core.window == 5
    assert core.stats.window_halvings == 1


def test_the_in_memory_network_is_deterministic() -> None:
    """Two runs with the same seeds leave the same counters and results: what a future
    byte-for-byte comparison of targets will rely on."""
    def run() -> tuple:
        net = ATPNetwork(K, 8, Faults(7, loss=0.05, duplicate=0.05, reorder=0.2))
        jobs = [run_job(net, app_id, tensors(app_id, 3, 200)) for app_id in (1, 2)]
        net.run()
        return (net.now, net.pipeline.ingress.event_counter.read(), [core.stats for job in jobs for core in job.workers])
    assert run() == run()


def test_a_worker_refuses_what_it_cannot_send_exactly() -> None:
    with pytest.raises(TypeError, match="int32 values"):
        WorkerCore(WorkerConfig(1, 0, 2, K), AggregatorMap(1, 4, 64), np.zeros(4, np.float32), 1, 0.0)
    with pytest.raises(ValueError, match="leave ATP's 1..2\\^32-1"):
        WorkerCore(WorkerConfig(1, 0, 2, K), AggregatorMap(1, 4, 64), np.zeros(4 * K, np.int32), 2**32 - 2, 0.0)
    with pytest.raises(ValueError, match="worker 2 of 2"):
        WorkerConfig(1, 2, 2, K)
