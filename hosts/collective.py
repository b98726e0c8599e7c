"""Pieces common to the TCP baselines: tensor checks, partitioning, and the measured run.

Why separate from :mod:`hosts.tcp_mesh`: that module only moves bytes; this one knows about
tensors (which dtypes the switch supports, how a tensor is cut into segments and chunks)
and about :class:`hosts.stats.JobStats`, so the ring and the parameter server partition and
measure identically and their numbers are comparable with the SwitchML client's.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Self

import numpy as np

from hosts.stats import JobStats
from hosts.tcp_counters import SegmentTimeline, TcpCounters
from hosts.tcp_mesh import Peer, PeerError, Pump

log = logging.getLogger(__name__)

SUPPORTED_DTYPES = (np.dtype(np.float32), np.dtype(np.int32))
"""What the switch aggregates; int32 sums wrap (numpy array addition wraps silently)."""


def flat_copy(tensor: np.ndarray) -> np.ndarray:
    """A contiguous 1-D copy to reduce in place (the caller's tensor stays untouched)."""
    if tensor.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"all-reduce supports float32 and int32 tensors, not {tensor.dtype}")
    return np.array(tensor, dtype=tensor.dtype, order="C", copy=True).reshape(-1)


def split_bounds(length: int, parts: int) -> list[tuple[int, int]]:
    """[start, stop) of ``parts`` near-equal pieces (first ``length % parts`` one longer; some may be empty)."""
    base, extra = divmod(length, parts)
    bounds = []
    start = 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def chunk_bounds(start: int, stop: int, chunk_elems: int) -> list[tuple[int, int]]:
    """[start, stop) of the pipeline chunks of one segment (none for an empty segment)."""
    return [(a, min(a + chunk_elems, stop)) for a in range(start, stop, chunk_elems)]


def chunk_elements(chunk_bytes: int, dtype: np.dtype) -> int:
    if chunk_bytes < dtype.itemsize:
        raise ValueError(f"chunk_bytes={chunk_bytes} is smaller than one {dtype} element")
    return chunk_bytes // dtype.itemsize


def measured_run(pump: Pump, started_s: float) -> JobStats:
    """Run ``pump`` to completion and return its JobStats (kernel TCP counter deltas, see tcp_counters).

    ``started_s`` is the ``time.perf_counter()`` at which the tensor was handed over, so TAT
    includes the copy and set-up of the all-reduce, as the SwitchML client's TAT does.
    """
    before = TcpCounters.read()
    timeline = SegmentTimeline(time.monotonic())
    pump.set_tick(timeline.sample)
    pump.run()
    tat_s = time.perf_counter() - started_s
    timeline.sample(time.monotonic(), final=True)
    delta = TcpCounters.read() - before
    return JobStats(tat_s=tat_s, packets_sent=delta.out_segs, packets_received=delta.in_segs,
                    retransmissions=delta.retrans_segs, timeouts=delta.timeouts, duplicates=delta.dsack_sent,
                    bytes_sent=pump.bytes_sent, bytes_received=pump.bytes_received, timeline=timeline.bins)


def local_stats(started_s: float) -> JobStats:
    """JobStats of a one-rank job: nothing crosses the network."""
    return JobStats(tat_s=time.perf_counter() - started_s)


class TcpCollective(ABC):
    """What the TCP baselines share: peers and timeouts, job numbering, the timed run.

    A subclass sets up its connections in :meth:`connect` (untimed) and describes one
    all-reduce as transfers queued on a :class:`Pump` in :meth:`_queue_transfers`.
    ``peers[i]`` is rank i's listening (IPv4, port). ``timeout_s`` is the deadline of one
    all-reduce, counted from the call (as SwitchML's ``job_deadline_s``, so a time limit
    means the same for every method): not finished by then is a :class:`PeerTimeout`
    naming the peers still pending. ``connect_timeout_s`` bounds connection set-up, which
    waits for ranks that start late.
    """

    name = "collective"

    def __init__(self, peers: Sequence[Peer], rank: int, chunk_bytes: int = 128 * 1024,
                 timeout_s: float = 10.0, connect_timeout_s: float = 30.0) -> None:
        if not 0 <= rank < len(peers):
            raise ValueError(f"rank {rank} outside 0..{len(peers) - 1}")
        self.peers = [(str(host), int(port)) for host, port in peers]
        self.rank = rank
        self.world = len(peers)
        self.chunk_bytes = chunk_bytes
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._seq = 0

    @abstractmethod
    def connect(self) -> None:
        ...

    @abstractmethod
    def close(self) -> None:
        ...

    @abstractmethod
    def _connected(self) -> bool:
        ...

    @abstractmethod
    def _queue_transfers(self, pump: Pump, out: np.ndarray, seq: int) -> None:
        """Queue every send and receive of all-reduce number ``seq`` on ``pump``, reducing into ``out``."""

    def allreduce(self, tensor: np.ndarray) -> tuple[np.ndarray, JobStats]:
        """Element-wise sum of ``tensor`` over all ranks (new flat array, same dtype) and the job's stats."""
        started = time.perf_counter()
        deadline_from = time.monotonic()
        out = flat_copy(tensor)
        seq = self._seq
        self._seq += 1
        if self.world == 1:
            return out, local_stats(started)
        if not self._connected():
            raise RuntimeError(f"{type(self).__name__}.connect() must be called before allreduce()")
        pump = Pump(self.timeout_s, since=deadline_from)
        try:
            self._queue_transfers(pump, out, seq)
            stats = measured_run(pump, started)
        except PeerError:
            log.error("%s rank %d: all-reduce #%d of %d %s failed", self.name, self.rank, seq, out.size, out.dtype)
            raise
        finally:
            pump.close()
        return out, stats

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
