"""One ATP all-reduce through the native data path: the core's arrays in Python, its loop in C.

``NativeCore`` hands a Python ``WorkerCore`` (hosts/atp/worker.py), just built by ``WorkerJob.begin``,
to worker.c in ``struct atp_job`` (mirrored here field for field): its chunks, sums, flags and
send times are the very arrays C reads and writes, and the aggregator map's indices go over
as an array. ``run`` drives worker.c's socket loop (``atp_run``) until the all-reduce ends;
``start``/``receive``/``expire`` step the C core from Python, for the differential test.
``sync`` writes what C keeps in the struct (progress, window, counts, the map) back into the
Python core and map, so that everything after the loop (the result, ``job_stats``, the next
all-reduce's map) is the Python worker's code whichever data path ran.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections import Counter

import numpy as np

import hosts.native as native
from hosts.atp.sockets import PayloadSockets
from hosts.atp.worker import WorkerCore
from hosts.mmsg import RECEIVE_SLACK_BYTES, REPORTED_ERRNOS, SEND_LOST_ERRNOS
from hosts.native import MAX_ERRNOS
from protocol.atp.packet import payload_bytes

SIGNAL_CHECK_S = 0.010
"""worker.c's loop returns to Python at least this often, so a signal handler runs (as SwitchML's)."""
TX_PER_POSITION = 4
"""Payloads tx holds per window position: a receive writes at most 2W - 1 (its gap's resends and a window)."""
ATP_DONE, ATP_TIMED_OUT, ATP_INTERRUPTED, ATP_FAILED, ATP_STALLED = range(5)
FAILED_CALLS = {1: "sendmmsg", 2: "recvmmsg", 3: "ppoll", 4: "malloc"}
STATS = ("packets_sent", "resends_gap", "resends_timeout", "results", "duplicates", "ignored", "collisions_adopted", "ecn_results",
         "window_halvings", "cwnd_count", "malformed", "received_bytes")

_p = ctypes.c_void_p
_i32, _u32, _i64, _f64 = ctypes.c_int32, ctypes.c_uint32, ctypes.c_int64, ctypes.c_double


class _Stats(ctypes.Structure):
    """struct atp_stats: WorkerStats, and the loop's malformed datagrams and bytes received."""

    _fields_ = [(name, _i64) for name in STATS]


class _Job(ctypes.Structure):
    """struct atp_job, in worker.c's order."""

    _fields_ = [
        *[(name, _i32) for name in ("app_id", "worker_id", "n_workers", "k", "congestion_control", "positions", "pool_size",
                                    "payload_bytes")],
        ("n_packets", _i64), ("seq_base", _u32), ("resend_timeout_s", _f64), ("stall_s", _f64), ("first_resend_timeout_s", _f64),
        ("scale", _f64), ("frame_s", _f64), *[(name, _p) for name in ("chunks", "sums", "values", "done", "sent_at", "gap_resent", "cwnd_log", "indices", "used")],
        ("done_through", _i64), ("next_packet", _i64), ("marker", _i64), ("cwnd", _f64), ("last_progress", _f64),
        ("ecn_in_window", _i32), ("stats", _Stats),
        *[(name, _i32) for name in ("rx_fd", "tx_fd", "rx_capacity", "rx_stride", "tx_capacity")],
        ("tx_count", _i64), ("tx", _p), ("rx", _p), ("rx_lengths", _p),
        *[(name, _f64) for name in ("t0", "deadline_s", "timeline_bin_s", "signal_check_s")],
        ("lost_errnos", _i32 * MAX_ERRNOS), ("n_lost_errnos", _i32),
        ("reported_errnos", _i32 * MAX_ERRNOS), ("n_reported_errnos", _i32),
        ("refusals", _i64 * MAX_ERRNOS), ("started", _i32),
        ("timeline", ctypes.POINTER(_i64)), ("timeline_len", _i64), ("timeline_capacity", _i64),
        ("failed_call", _i32), ("failed_errno", _i32),
    ]  # fmt: skip


STRUCTS = {"atp_stats": _Stats, "atp_job": _Job}
"""worker.c's name of each struct mirrored here."""


def declare(lib: ctypes.CDLL) -> None:
    """Give the library's functions their signatures; refuse a library whose structs this
    file does not mirror (hosts/native's layout check)."""
    lib.atp_job_size.restype = lib.atp_field_count.restype = _i64
    lib.atp_field_offset.argtypes = [ctypes.c_char_p]
    lib.atp_field_offset.restype = _i64
    job = ctypes.POINTER(_Job)
    lib.atp_run.argtypes = lib.atp_release.argtypes = [job]
    lib.atp_run.restype = ctypes.c_int
    lib.atp_release.restype = None
    lib.atp_start.argtypes = lib.atp_expire.argtypes = [job, _f64]
    lib.atp_receive.argtypes = [job, ctypes.c_char_p, _i64, _f64]
    lib.atp_start.restype = lib.atp_expire.restype = lib.atp_receive.restype = lib.atp_window.restype = _i64
    lib.atp_next_timer.argtypes = lib.atp_window.argtypes = [job]
    lib.atp_next_timer.restype = lib.atp_hold_s.restype = _f64
    lib.atp_hold_s.argtypes = [job, _i64]
    if differences := native.layout_differences(lib, "atp", {_Job: lib.atp_job_size()}, STRUCTS):
        raise native.NativeUnavailable(f"worker.c and hosts/atp/native/job.py lay out the shared structs differently: {differences[0]}"
                                       + (f" (and {len(differences) - 1} more)" if len(differences) > 1 else ""))


def _address(array: np.ndarray) -> int:
    if not array.flags.c_contiguous:
        raise ValueError("the native data path needs contiguous arrays")
    return array.ctypes.data


class NativeCore:
    """worker.c's core over the state of the Python ``core``, which it advances in place."""

    def __init__(self, core: WorkerCore, t0: float = 0.0, deadline_s: float = 0.0, timeline_bin_s: float = 1.0) -> None:
        from hosts.atp.native import library

        self.lib = library()
        self.core = core
        aggregators = core._map
        config = core.config
        self.indices = np.array(aggregators.indices, dtype=np.int32)
        self.used = np.zeros(aggregators.pool_size, dtype=np.uint8)
        self.used[self.indices] = 1
        self.cwnd_log = np.zeros(core.n_packets + 1)
        self.payload_bytes = payload_bytes(config.k)
        self.tx = np.zeros((TX_PER_POSITION * aggregators.positions, self.payload_bytes), dtype=np.uint8)
        arrays = (core._chunks, core._sums, core._done, core._sent_at, core._gap_resent, self.cwnd_log, self.indices, self.used)
        self.job = _Job(
            app_id=config.app_id, worker_id=config.worker_id, n_workers=config.n_workers, k=config.k,
            congestion_control=int(config.congestion_control), positions=aggregators.positions, pool_size=aggregators.pool_size,
            payload_bytes=self.payload_bytes, n_packets=core.n_packets, seq_base=core.seq_base,
            resend_timeout_s=config.resend_timeout_s, stall_s=config.stall_s, first_resend_timeout_s=config.first_resend_timeout_s,
            scale=0.0 if core.scale is None else core.scale, frame_s=config.frame_s, values=None if core._values is None else _address(core._values),
            **dict(zip(("chunks", "sums", "done", "sent_at", "gap_resent", "cwnd_log", "indices", "used"), map(_address, arrays))),
            done_through=core.done_through, next_packet=core.next_packet, marker=core._marker, cwnd=core.cwnd,
            last_progress=core._last_progress, ecn_in_window=int(core._ecn_in_window),
            rx_fd=-1, tx_fd=-1, tx_capacity=len(self.tx), tx=_address(self.tx),
            t0=t0, deadline_s=deadline_s, timeline_bin_s=timeline_bin_s, signal_check_s=SIGNAL_CHECK_S,
            n_lost_errnos=len(SEND_LOST_ERRNOS), n_reported_errnos=len(REPORTED_ERRNOS),
        )  # fmt: skip
        self.job.lost_errnos[: len(SEND_LOST_ERRNOS)] = SEND_LOST_ERRNOS
        self.job.reported_errnos[: len(REPORTED_ERRNOS)] = REPORTED_ERRNOS
        self._keep = arrays  # alive while C points into them

    # -- stepping from Python (tests/test_native_atp.py) -----------------------------------

    def _written(self, count: int) -> list[bytes]:
        out = [self.tx[i].tobytes() for i in range(count)]
        self.job.tx_count = 0
        return out

    def start(self, now: float) -> list[bytes]:
        return self._written(self.lib.atp_start(ctypes.byref(self.job), now))

    def receive(self, payload: bytes, now: float) -> list[bytes]:
        return self._written(self.lib.atp_receive(ctypes.byref(self.job), payload, len(payload), now))

    def expire(self, now: float) -> list[bytes] | None:
        """The resends, or None where the Python core raises ATPStalled."""
        count = self.lib.atp_expire(ctypes.byref(self.job), now)
        return None if count < 0 else self._written(count)

    def next_timer(self) -> float | None:
        due = self.lib.atp_next_timer(ctypes.byref(self.job))
        return None if due == np.inf else due

    @property
    def window(self) -> int:
        return self.lib.atp_window(ctypes.byref(self.job))

    def hold_s(self, received: int) -> float:
        return self.lib.atp_hold_s(ctypes.byref(self.job), received)

    # -- the socket loop ---------------------------------------------------------------

    def run(self, io: PayloadSockets) -> tuple[list[int], Counter[int]]:
        """worker.c's loop over ``io``'s sockets until the all-reduce is done, then ``sync``:
        the send timeline's bins and the refusals by errno. Raises what the Python loop
        raises: ATPStalled (the Python core's own, from its ``expire``), TimeoutError at the
        deadline (the client names it), OSError for a failed call."""
        capacity = io.rx.capacity
        stride = self.payload_bytes + RECEIVE_SLACK_BYTES
        rx = np.zeros((capacity, stride), dtype=np.uint8)
        rx_lengths = np.zeros(capacity, dtype=np.uint32)
        job = self.job
        job.rx_fd, job.tx_fd = io.receiving.fileno(), io.sending.fileno()
        job.rx_capacity, job.rx_stride, job.rx, job.rx_lengths = capacity, stride, _address(rx), _address(rx_lengths)
        try:
            while (status := self.lib.atp_run(ctypes.byref(job))) == ATP_INTERRUPTED:
                pass  # returning to Python ran the signal's handler; continue where the loop stopped
            bins = [int(job.timeline[i]) for i in range(job.timeline_len)]
        finally:
            self.lib.atp_release(ctypes.byref(job))
            self.sync()
        refusals = Counter({code: n for code, n in zip(SEND_LOST_ERRNOS, job.refusals) if n})
        if status == ATP_STALLED:
            self.core.expire(self.core._last_progress + self.core.config.stall_s)  # raises the Python core's ATPStalled
        if status == ATP_TIMED_OUT:
            raise TimeoutError(errno.ETIMEDOUT, "the all-reduce's deadline passed")
        if status == ATP_FAILED:
            code = job.failed_errno
            raise OSError(code, f"{FAILED_CALLS.get(job.failed_call, 'worker.c')}: {os.strerror(code)}")
        if status != ATP_DONE:
            raise RuntimeError(f"worker.c's atp_run returned {status}")
        return bins, refusals

    def sync(self) -> None:
        """What C keeps in the struct back into the Python core and its aggregator map."""
        core, job = self.core, self.job
        core.done_through, core.next_packet, core._marker = job.done_through, job.next_packet, job.marker
        core.cwnd, core._last_progress, core._ecn_in_window = job.cwnd, job.last_progress, bool(job.ecn_in_window)
        for name in STATS[:-3]:
            setattr(core.stats, name, getattr(job.stats, name))
        core.stats.cwnd = self.cwnd_log[: job.stats.cwnd_count].tolist()
        core._map.repoint(self.indices.tolist())

    @property
    def malformed(self) -> int:
        return self.job.stats.malformed

    @property
    def received_bytes(self) -> int:
        return self.job.stats.received_bytes
