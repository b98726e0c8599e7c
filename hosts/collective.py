"""Pieces common to the TCP baselines: tensor checks, partitioning, and the measured run.

Why separate from :mod:`hosts.tcp_mesh`: that module only moves bytes; this one knows about
tensors (which dtypes the switch supports, how a tensor is cut into segments and chunks)
and about :class:`hosts.stats.JobStats`, so the ring and the parameter server partition and
measure identically and their numbers are comparable with the SwitchML client's.
"""

from __future__ import annotations

import time

import numpy as np

from hosts.stats import JobStats
from hosts.tcp_counters import SegmentTimeline, TcpCounters
from hosts.tcp_mesh import Pump

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
