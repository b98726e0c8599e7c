"""One all-reduce through the native data path: the job's arrays in Python, its loop in C.

``NativeJob`` is what ``AllReduceJob`` (hosts/switchml/job.py) is for the Python worker,
with the same constructor and results: the plan, the padded chunks, the exponents of the
lead round and the scale table are prepared exactly as ``WorkerCore`` prepares them; the
arrays are handed to worker.c's ``sml_run`` in ``struct sml_job`` (mirrored here field
for field), which runs the whole send/receive loop. A signal interrupts the loop, and the
loop returns every SIGNAL_CHECK_S anyway: the call returns, Python runs any pending
handler (which may raise, e.g. the runner's SIGTERM), and the loop resumes where it stopped.
"""

from __future__ import annotations

import ctypes
import math
from collections import Counter
import os
import time

import numpy as np

import hosts.native as native
from hosts.native import MAX_ERRNOS

from hosts.stats import TIMELINE_BIN_S, JobStats
from hosts.switchml.core import JobArrays, JobContext, SwitchMLTimeout, check_send_buffer, missing_slots
from hosts.mmsg import REPORTED_ERRNOS, SEND_LOST_ERRNOS, BatchSocket, errno_counts
from hosts.switchml.pool import SlotPool
from hosts.switchml.timers import RoundTripEstimator

SIGNAL_CHECK_S = 0.010
"""worker.c's loop returns to Python at least this often (``signal_check_s``), so that a
signal handler runs within about this long even while every call of the loop finds work
(a flood, a busy job): a signal during a non-blocking call only marks it pending. A return
and the next call cost microseconds."""
SML_DONE, SML_TIMED_OUT, SML_INTERRUPTED, SML_FAILED, SML_RUNNING = range(5)
FAILED_CALLS = {1: "sendmmsg", 2: "recvmmsg", 3: "ppoll", 4: "malloc"}

_p = ctypes.c_void_p
_i32, _u32, _i64, _f64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_double


class NativeRoundTrip(ctypes.Structure):
    """struct sml_rtt: RoundTripEstimator's state, kept by the client across its jobs."""

    _fields_ = [("ring", _f64 * RoundTripEstimator.WINDOW), ("count", _i64), ("shortest", _f64),
                ("median", _f64), ("median_valid", _i32)]

    def __init__(self) -> None:
        super().__init__(shortest=math.inf)


class _Policy(ctypes.Structure):
    _fields_ = [("min_s", _f64), ("max_s", _f64), ("first_s", _f64), ("backoff_every", _i64)]


class _Stats(ctypes.Structure):
    _fields_ = [(name, _i64) for name in ("packets_sent", "packets_received", "retransmissions", "timeouts",
                                          "duplicates", "bytes_sent", "bytes_received", "rejected_results")]


class _Job(ctypes.Structure):
    """struct sml_job, in worker.c's order."""

    _fields_ = [
        *[(name, _i32) for name in ("fd", "k", "n_slots", "n_chunks", "lead", "total_packets", "quantized", "capacity",
                                    "record_bytes", "rx_stride")],
        ("job_id", _u32), ("seq_base", _u32),
        ("t0", _f64), ("deadline_s", _f64), ("timeline_bin_s", _f64), ("signal_check_s", _f64),
        ("policy", _Policy),
        *[(name, _p) for name in ("chunks", "packet_exponents", "scales", "e_max", "sums", "values", "shadow_set", "pool_packets",
                                  "outstanding", "tx", "rx", "rx_lengths")],
        ("rtt", ctypes.POINTER(NativeRoundTrip)),
        *[(name, _p) for name in ("deadline", "backoff", "sent_at", "token", "timeouts_per_slot", "resent", "scratch")],
        ("lost_errnos", _i32 * MAX_ERRNOS), ("n_lost_errnos", _i32),
        ("reported_errnos", _i32 * MAX_ERRNOS), ("n_reported_errnos", _i32),
        ("refusals", _i64 * MAX_ERRNOS),
        ("started", _i32), ("unsent", _i64), ("remaining", _i64), ("since_timer_check", _i64), ("batch", _i64), ("answered", _i32),
        ("stats", _Stats),
        ("timeline", ctypes.POINTER(_i64)), ("timeline_len", _i64), ("timeline_capacity", _i64),
        ("failed_call", _i32), ("failed_errno", _i32),
    ]  # fmt: skip


class NativeStep(ctypes.Structure):
    """struct sml_step: core.Step."""

    _fields_ = [("send", _i64), ("wake_at", _f64), ("on_arrival", _i32), ("status", _i32)]


STRUCTS = {"sml_job": _Job, "sml_rtt": NativeRoundTrip, "sml_policy": _Policy, "sml_stats": _Stats, "sml_step": NativeStep}
"""worker.c's name of each struct mirrored here."""


def layout_differences(lib: ctypes.CDLL) -> list[str]:
    """Where worker.c and these mirrors disagree: a size, a field's offset, a field only one
    side has (empty when they agree; hosts/native's check)."""
    return native.layout_differences(lib, "sml", {_Job: lib.sml_job_size(), NativeRoundTrip: lib.sml_rtt_size()}, STRUCTS)


def declare(lib: ctypes.CDLL) -> None:
    """Give the library's functions their signatures and check that both sides lay the
    structs out alike, field by field (a compiler or platform that disagrees is refused,
    not trusted)."""
    from hosts.switchml.native import NativeUnavailable

    lib.sml_job_size.restype = lib.sml_rtt_size.restype = lib.sml_field_count.restype = _i64
    lib.sml_field_offset.argtypes = [ctypes.c_char_p]
    lib.sml_field_offset.restype = _i64
    lib.sml_run.argtypes = lib.sml_release.argtypes = [ctypes.POINTER(_Job)]
    lib.sml_run.restype = ctypes.c_int
    lib.sml_start.argtypes = [ctypes.POINTER(_Job), _f64]
    lib.sml_step.argtypes = [ctypes.POINTER(_Job), _f64, _i64]
    lib.sml_start.restype = lib.sml_step.restype = NativeStep
    lib.sml_release.restype = None
    if differences := layout_differences(lib):
        raise NativeUnavailable(f"worker.c and hosts/switchml/native/job.py lay out the shared structs differently: {differences[0]}"
                                + (f" (and {len(differences) - 1} more)" if len(differences) > 1 else ""))


def _address(array: np.ndarray) -> int:
    if not array.flags.c_contiguous:
        raise ValueError("the native data path needs contiguous arrays")
    return array.ctypes.data


def scratch_entries(n_slots: int, capacity: int) -> int:
    """How many int64 a step's working arrays take in worker.c (struct scratch): five per
    datagram of a batch of ``capacity``, four per slot."""
    return 5 * capacity + 4 * n_slots


def slot_arrays(n_slots: int, capacity: int) -> dict[str, np.ndarray]:
    """SlotTimers' arrays for worker.c, one entry per slot, unarmed, and the working arrays of
    its steps (struct scratch: per datagram of a batch of ``capacity``, or per slot)."""
    return {"deadline": np.full(n_slots, np.inf), "backoff": np.ones(n_slots), "sent_at": np.zeros(n_slots),
            "token": np.full(n_slots, -1, dtype=np.int64), "timeouts_per_slot": np.zeros(n_slots, dtype=np.int64),
            "resent": np.zeros(n_slots, dtype=np.uint8), "scratch": np.zeros(scratch_entries(n_slots, capacity), dtype=np.int64)}


def job_struct(arrays: JobArrays, values: np.ndarray | None, slots: dict[str, np.ndarray], pool: SlotPool, ctx: JobContext,
               rtt: NativeRoundTrip, seq_base: int, t0: float, timeline_bin_s: float, tx: np.ndarray, rx: np.ndarray,
               rx_lengths: np.ndarray, fd: int = -1) -> _Job:
    """struct sml_job for one all-reduce: the job's arrays, the slot pool, the slots' arrays
    (``slot_arrays``, for as many datagrams as ``rx`` holds), the caller's send and receive
    buffers (``rx``: one row per datagram) and its socket (-1 for a driver that hands
    worker.c's core its datagrams itself: simulation/switchml/native/star.c, the step's differential
    test). The arrays must outlive the struct."""
    plan, policy = arrays.plan, ctx.policy
    if len(slots["scratch"]) < (needed := scratch_entries(plan.n_slots, len(rx))):  # worker.c writes into it unchecked
        raise ValueError(f"the step's scratch holds {len(slots['scratch'])} entries, {len(rx)} datagrams and "
                         f"{plan.n_slots} slots need {needed} (slot_arrays)")
    job = _Job(
        fd=fd, k=pool.k, n_slots=plan.n_slots, n_chunks=plan.n_chunks, lead=plan.lead, total_packets=plan.total_packets,
        quantized=int(arrays.quantized), capacity=len(rx), record_bytes=tx.dtype.itemsize, rx_stride=rx.strides[0],
        job_id=ctx.job_id, seq_base=seq_base, t0=t0, deadline_s=ctx.deadline_s, timeline_bin_s=timeline_bin_s,
        signal_check_s=SIGNAL_CHECK_S, policy=_Policy(policy.min_s, policy.max_s, policy.first_s, policy.backoff_every),
        chunks=_address(arrays.chunks), packet_exponents=_address(arrays.packet_exponents), scales=_address(arrays.scales),
        e_max=_address(arrays.e_max), sums=_address(arrays.int_sum),
        values=None if values is None else _address(values), shadow_set=_address(pool.shadow_set),
        pool_packets=_address(pool.packets), outstanding=_address(arrays.outstanding), tx=_address(tx),
        rx=rx.ctypes.data, rx_lengths=_address(rx_lengths), rtt=ctypes.pointer(rtt),
        **{name: _address(array) for name, array in slots.items()},
        n_lost_errnos=len(SEND_LOST_ERRNOS), n_reported_errnos=len(REPORTED_ERRNOS),
        started=0, unsent=plan.total_packets, remaining=plan.n_slots,
    )  # fmt: skip
    job.lost_errnos[: len(SEND_LOST_ERRNOS)] = SEND_LOST_ERRNOS
    job.reported_errnos[: len(REPORTED_ERRNOS)] = REPORTED_ERRNOS
    return job


def job_stats(job: _Job, stats: JobStats) -> None:
    """The struct's statistics and send timeline into ``stats``."""
    for name, _ in _Stats._fields_:
        setattr(stats, name, getattr(job.stats, name))
    stats.timeline = job.timeline[: job.timeline_len] if job.timeline_len else []


class NativeJob:
    """Sends ``tensor`` through the pool with worker.c's loop; ``run`` does it once."""

    def __init__(self, io: BatchSocket, pool: SlotPool, ctx: JobContext, rtt: NativeRoundTrip, tensor: np.ndarray,
                 block_exponents: np.ndarray | None, seq_base: int, t0: float, sock_fd: int) -> None:
        from hosts.switchml.native import library

        self._lib = library()
        self._io = io
        self._ctx = ctx
        self._t0 = t0
        self._pool = pool
        arrays = JobArrays.make(tensor, block_exponents, pool, ctx.n_workers)
        self._plan = plan = arrays.plan
        check_send_buffer(plan, pool, io.tx)
        if io.rx.dtype != io.tx.dtype or len(io.rx) != len(io.tx) or io.rx.strides[0] < io.rx.dtype.itemsize:
            raise ValueError("the receive buffers must be as many as the send buffer's records, each at least one record")
        self.e_max, self.int_sum, self.outstanding = arrays.e_max, arrays.int_sum, arrays.outstanding
        self.values: np.ndarray | None = np.zeros(plan.n_chunks * pool.k, dtype=np.float32) if arrays.quantized else None
        """The sums dequantized, chunk by chunk as the results arrive (float32 jobs)."""
        slots = slot_arrays(plan.n_slots, io.capacity)
        self._rx_lengths = np.zeros(io.capacity, dtype=np.uint32)
        self._keep = (arrays, slots)  # alive while C points into them
        self._job = job_struct(arrays, self.values, slots, pool, ctx, rtt, seq_base, t0, TIMELINE_BIN_S, io.tx, io.rx,
                               self._rx_lengths, sock_fd)
        self.stats = JobStats()

    @property
    def total_packets(self) -> int:
        return self._plan.total_packets

    def run(self) -> None:
        """Run the job to completion, or raise SwitchMLTimeout at the deadline."""
        job = self._job
        try:
            while (status := self._lib.sml_run(ctypes.byref(job))) == SML_INTERRUPTED:
                pass  # returning to Python ran the signal's handler; continue where the loop stopped
        finally:
            self._collect()
        if status == SML_TIMED_OUT:
            elapsed = time.perf_counter() - self._t0
            refusals = {code: n for code, n in zip(SEND_LOST_ERRNOS, job.refusals) if n}
            raise SwitchMLTimeout(self._ctx.job_id, self._ctx.rank, elapsed,
                                  missing_slots(self.outstanding, self._pool.shadow_set, job.seq_base), refusals)
        if status == SML_FAILED:
            code = job.failed_errno
            raise OSError(code, f"{FAILED_CALLS.get(job.failed_call, 'worker.c')}: {os.strerror(code)}")
        if status != SML_DONE:
            raise RuntimeError(f"worker.c's sml_run returned {status}")

    def _collect(self) -> None:
        """Stats, timeline and refusals out of the struct; the C-owned timeline freed."""
        job = self._job
        job_stats(job, self.stats)
        refusals = Counter({code: n for code, n in zip(SEND_LOST_ERRNOS, job.refusals) if n})
        self._io.refusals.update(refusals)
        self.stats.socket_errors = errno_counts(refusals)
        self._lib.sml_release(ctypes.byref(job))
