"""Per-job statistics of one worker, shared by SwitchML and the baselines.

Every all-reduce implementation (SwitchML, ring, parameter server) returns a ``JobStats``
so the runner writes one row per worker into runs.csv and timeline.csv
(docs/results-format.md) without knowing which method produced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

TIMELINE_BIN_S = 0.010
"""Width of one timeline bin: the paper plots packets sent per 10 ms."""


@dataclass
class JobStats:
    """What one worker saw during one all-reduce.

    ``tat_s`` runs from handing the tensor to the library until the full result is
    available. Byte counts are what the method hands to / receives from its sockets
    (UDP payloads for SwitchML), so methods with different transports compare on
    application bytes. ``timeline[i]`` counts packets sent in [i, i+1) * TIMELINE_BIN_S
    after the start of the job.
    """

    tat_s: float = 0.0
    packets_sent: int = 0
    packets_received: int = 0
    retransmissions: int = 0
    timeouts: int = 0
    duplicates: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    timeline: list[int] = field(default_factory=list)
    socket_errors: dict[str, int] = field(default_factory=dict)
    """errno name -> datagrams the kernel refused to send, or reported lost, with it: ICMP
    errors (forged or real) and a link that is down (hosts/switchml/mmsg.py,
    SEND_LOST_ERRNOS). Each was a loss the timers recovered; empty for TCP methods."""
    rejected_results: int = 0
    """Results refused because no correct switch sends them (SwitchML: a block exponent
    below this worker's own); like a loss, the timer resends and the switch answers again."""


def added(total: JobStats, more: JobStats) -> JobStats:
    """Two jobs' statistics as one (a DDP step's buckets, a script's all-reduces): counts
    and times added, timelines back to back."""
    return JobStats(**{f.name: _added(getattr(total, f.name), getattr(more, f.name)) for f in fields(JobStats)})


def _added(a: Any, b: Any) -> Any:
    if isinstance(a, dict):
        return {key: a.get(key, 0) + b.get(key, 0) for key in sorted(a.keys() | b.keys())}
    return a + b


class SendTimeline:
    """Counts packets sent per TIMELINE_BIN_S bin, growing as the job runs.

    Kept outside JobStats so the hot path touches one list and two floats, not a dataclass.
    """

    __slots__ = ("_t0", "_bins")

    def __init__(self, t0: float) -> None:
        self._t0 = t0
        self._bins: list[int] = []

    def record(self, now: float, packets: int = 1) -> None:
        """Add ``packets`` sent at time ``now`` (same clock as t0, e.g. time.perf_counter)."""
        index = int((now - self._t0) / TIMELINE_BIN_S)
        bins = self._bins
        if index >= len(bins):
            bins.extend([0] * (index + 1 - len(bins)))
        bins[index] += packets

    @property
    def bins(self) -> list[int]:
        return list(self._bins)
