"""The loop's policy, differentially: core.py's ``start``/``step`` against worker.c's
``sml_start``/``sml_step``, turn by turn.

Every driver (job.py, worker.c's socket loop, the SimPy worker, star.c) only does what the
core's step says, so holding the two steps equal holds every driver's decisions equal. One
worker's job runs on both cores at once under a scripted network: this test is the switch
and the clock. Each turn hands both the same datagrams at the same time and demands the same
``Step`` (packets to send, wake time, whether an arrival wakes early, status) and the same
packets, byte for byte; at the end the same sums, exponents, statistics and send timeline.
The network answers each update after a random round trip (long enough, at times, that the
worker holds), loses some updates and results (timeouts, resends, backoff), duplicates and
truncates some results and forges some below the worker's own exponent (rejected); one job
misses its deadline.
"""

from __future__ import annotations

import ctypes
import dataclasses
import heapq

import numpy as np
import pytest

from hosts.switchml.core import DONE, RUNNING, TIMED_OUT, JobArrays, JobContext, Step, WorkerCore, prepare_tensor
from hosts.switchml.native import NativeUnavailable, library
from hosts.switchml.native.job import NativeRoundTrip, job_stats, job_struct, slot_arrays
from hosts.switchml.pool import SlotPool
from hosts.switchml.timers import RetransmitPolicy
from hosts.stats import JobStats
from protocol.switchml import params
from protocol.packet import EXPONENT_MIN

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

K, POOL, N_WORKERS, JOB_ID = 8, 6, 3, 9
POLICY = RetransmitPolicy(min_s=0.004, max_s=0.05, first_s=0.01, backoff_every=3)
T0 = 7.0
COUNTERS = ("packets_sent", "packets_received", "retransmissions", "timeouts", "duplicates", "bytes_sent", "bytes_received",
            "rejected_results")


def native_library():
    try:
        return library()
    except NativeUnavailable as exc:
        pytest.skip(f"worker.c does not build here: {exc}")


@dataclasses.dataclass
class Network:
    """The switch and the wire, scripted by ``rng``: what each update sent brings back, when."""

    rng: np.random.Generator
    loss: float
    duplicates: float
    forged: float
    runts: float
    in_flight: list = dataclasses.field(default_factory=list)
    order: int = 0

    def carry(self, packets: np.ndarray, now: float) -> None:
        """The results of ``packets`` (update records), each arriving after its round trip."""
        for record in packets:
            if self.rng.random() < self.loss:
                continue
            result = record.copy()
            result["msg_type"] = params.MSG_RESULT
            result["data"] = (record["data"].astype(np.int64) * N_WORKERS).astype(np.int32)  # wraps like the switch
            if record["exponent"] > EXPONENT_MIN:  # the lookahead round: the largest of the workers' exponents
                result["exponent"] = record["exponent"] + self.rng.integers(0, 2)
                if self.rng.random() < self.forged:
                    forged = result.copy()
                    forged["exponent"] = record["exponent"] - 1
                    self._arrive(now + 0.0005, forged, forged.dtype.itemsize)
            round_trip = 0.001 + 0.004 * self.rng.random()  # queueing beyond the shortest: the worker holds
            length = result.dtype.itemsize - 3 if self.rng.random() < self.runts else result.dtype.itemsize
            self._arrive(now + round_trip, result, length)
            if self.rng.random() < self.duplicates:
                self._arrive(now + round_trip + 0.002 * self.rng.random(), result, result.dtype.itemsize)

    def _arrive(self, at: float, record: np.ndarray, length: int) -> None:
        self.order += 1
        heapq.heappush(self.in_flight, (at, self.order, record.tobytes()[:length], length))

    def next_arrival(self) -> float:
        return self.in_flight[0][0] if self.in_flight else np.inf

    def take(self, now: float, capacity: int) -> list[tuple[bytes, int]]:
        """What has arrived by ``now``, up to one batch (the rest waits for the next)."""
        taken = []
        while self.in_flight and self.in_flight[0][0] <= now and len(taken) < capacity:
            _, _, payload, length = heapq.heappop(self.in_flight)
            taken.append((payload, length))
        return taken


class NativeCore:
    """worker.c's core for one job, stepped from Python (what star.c does in C)."""

    def __init__(self, x: np.ndarray, exponents: np.ndarray | None, ctx: JobContext, capacity: int) -> None:
        self.lib = native_library()
        self.pool = SlotPool(POOL, K)
        self.arrays = JobArrays.make(x, exponents, self.pool, N_WORKERS)
        self.values = np.zeros(self.arrays.plan.n_chunks * K, dtype=np.float32) if self.arrays.quantized else None
        self.slots = slot_arrays(self.arrays.plan.n_slots, capacity)
        self.tx = np.zeros(capacity, dtype=self.pool.packets.dtype)
        self.rx = np.zeros(capacity, dtype=self.pool.packets.dtype)
        self.rx_lengths = np.zeros(capacity, dtype=np.uint32)
        self.rtt = NativeRoundTrip()
        self.job = job_struct(self.arrays, self.values, self.slots, self.pool, ctx, self.rtt, 0, T0, 0.01, self.tx, self.rx,
                              self.rx_lengths)

    def start(self, now: float) -> Step:
        return self._step(self.lib.sml_start(ctypes.byref(self.job), now))

    def step(self, now: float, rx: np.ndarray, lengths: np.ndarray) -> Step:
        self.rx[: len(rx)] = rx
        self.rx_lengths[: len(rx)] = lengths
        return self._step(self.lib.sml_step(ctypes.byref(self.job), now, len(rx)))

    @staticmethod
    def _step(native) -> Step:
        return Step(native.send, native.wake_at, bool(native.on_arrival), native.status)

    def stats(self) -> JobStats:
        stats = JobStats()
        job_stats(self.job, stats)
        self.lib.sml_release(ctypes.byref(self.job))
        return stats


def batch(arrived: list[tuple[bytes, int]], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """Datagrams as the drivers hand them over: whole records (a runt zero-padded) and their lengths."""
    records = b"".join(payload.ljust(dtype.itemsize, b"\0") for payload, _ in arrived)
    return np.frombuffer(records, dtype=dtype).copy(), np.array([length for _, length in arrived], dtype=np.int64)


def run_both(tensor: np.ndarray, network: Network, deadline_s: float = 60.0) -> tuple[list[tuple[float, Step]], WorkerCore, NativeCore]:
    """One job on both cores, turn by turn as a driver would run it; every turn's time and Step."""
    x, exponents = prepare_tensor(tensor, K)
    ctx = JobContext(rank=0, n_workers=N_WORKERS, job_id=JOB_ID, policy=POLICY, deadline_s=deadline_s)
    capacity = 2 * POOL
    python_tx = np.zeros(capacity, dtype=SlotPool(POOL, K).packets.dtype)
    python = WorkerCore(SlotPool(POOL, K), ctx, x, exponents, 0, T0, python_tx, timeline_bin_s=0.01)
    native = NativeCore(x, exponents, ctx, capacity)
    now = T0
    ours, theirs = python.start(now), native.start(now)
    steps = []
    while True:
        assert ours == theirs, f"turn {len(steps)} at {now}: core.py {ours}, worker.c {theirs}"
        assert python_tx[: ours.send].tobytes() == native.tx[: theirs.send].tobytes(), f"turn {len(steps)}: the packets differ"
        steps.append((now, ours))
        network.carry(python_tx[: ours.send], now)
        if ours.status != RUNNING:
            return steps, python, native
        assert len(steps) < 100_000, "the job does not end"
        now = min(ours.wake_at, network.next_arrival()) if ours.on_arrival else ours.wake_at
        rx, lengths = batch(network.take(now, capacity), python_tx.dtype)
        ours, theirs = python.step(now, rx, lengths), native.step(now, rx, lengths)


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
@pytest.mark.parametrize(("loss", "duplicates", "forged", "runts"), [(0.0, 0.0, 0.0, 0.0), (0.1, 0.2, 0.1, 0.05)],
                         ids=["clean", "lossy"])
def test_both_cores_step_alike(dtype: type, loss: float, duplicates: float, forged: float, runts: float) -> None:
    rng = np.random.default_rng(3)
    tensor = (rng.standard_normal(K * 80 + 5) * 4).astype(dtype)
    steps, python, native = run_both(tensor, Network(np.random.default_rng(4), loss, duplicates, forged, runts))
    assert steps[-1][1].status == DONE
    assert np.array_equal(python.int_sum, native.arrays.int_sum) and np.array_equal(python.e_max, native.arrays.e_max)
    stats = native.stats()
    assert [getattr(python.stats, name) for name in COUNTERS] == [getattr(stats, name) for name in COUNTERS]
    assert python.timeline == stats.timeline
    # what the scenario must have exercised, or it tests less than it says
    assert any(step.on_arrival for _, step in steps), "no step waited for a result"
    holds = [step for now, step in steps if not step.on_arrival and step.status == RUNNING and step.wake_at > now]
    if loss:
        assert stats.retransmissions > 0 and stats.duplicates > 0
        assert (stats.rejected_results > 0) == (dtype == np.float32), "only a quantized job checks a result's exponent"
        assert max(native.slots["timeouts_per_slot"]) >= POLICY.backoff_every, "no slot backed off"
    assert holds, "no step held"


def test_a_missed_deadline_is_the_same_last_step_on_both() -> None:
    tensor = np.arange(K * 30, dtype=np.int32)
    steps, python, native = run_both(tensor, Network(np.random.default_rng(5), 0.6, 0.0, 0.0, 0.0), deadline_s=0.05)
    assert steps[-1][1].status == TIMED_OUT and python.remaining > 0
    assert np.array_equal(python.outstanding, native.arrays.outstanding)
    native.stats()
