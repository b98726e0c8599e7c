"""Per-job statistics of one worker, shared by SwitchML and the baselines.

Every all-reduce implementation (SwitchML, ring, parameter server) returns a ``JobStats``
so the runner writes one row per worker into runs.csv and timeline.csv
(docs/results-format.md) without knowing which method produced it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

LAST_SUFFIX = "_last"
"""A ``JobStats.protocol`` key with this ending is a state at the job's end, not a count."""
TIMELINE_BIN_S = 0.010
"""Width of one timeline bin: the paper plots packets sent per 10 ms."""
TIMELINE_MIN_BINS = 20
"""A job shorter than this many 10 ms bins (a simulated job at 100 Gbit/s takes about a
millisecond) gets finer bins: ``timeline_bin_for``."""
BIN_STEPS = (1, 2, 5)
"""Bin widths are one of these times a power of ten, so that the axis reads plainly."""


def timeline_bin_for(expected_s: float) -> float:
    """The send timeline's bin for a job expected to take ``expected_s`` at line rate: the
    paper's 10 ms, or the widest 1-2-5 step of at least 1 µs that splits the job into
    TIMELINE_MIN_BINS bins. (A job that loses packets takes longer: more bins, not fewer.)"""
    target = expected_s / TIMELINE_MIN_BINS
    if target >= TIMELINE_BIN_S:
        return TIMELINE_BIN_S
    decade = 1e-6
    best = decade
    while decade <= TIMELINE_BIN_S:
        for step in BIN_STEPS:
            if step * decade <= target:
                best = step * decade
        decade *= 10
    return best


@dataclass
class JobStats:
    """What one worker saw during one all-reduce.

    ``tat_s`` runs from handing the tensor to the library until the full result is
    available. Byte counts are what the method hands to / receives from its sockets
    (UDP payloads for SwitchML), so methods with different transports compare on
    application bytes. ``timeline[i]`` counts packets sent in [i, i+1) * TIMELINE_BIN_S
    after the start of the job, ``timeline_bin_s`` wide.
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
    timeline_bin_s: float = TIMELINE_BIN_S
    socket_errors: dict[str, int] = field(default_factory=dict)
    """errno name -> datagrams the kernel refused to send, or reported lost, with it: ICMP
    errors (forged or real) and a link that is down (hosts/mmsg.py,
    SEND_LOST_ERRNOS). Each was a loss the timers recovered; empty for TCP methods."""
    rejected_results: int = 0
    """Results refused because no correct switch sends them (SwitchML: a block exponent
    below this worker's own); like a loss, the timer resends and the switch answers again."""
    protocol: dict[str, float] = field(default_factory=dict)
    """The in-network protocol's own counts, by name (ATP: collisions adopted, resends by
    cause, ECN-marked results, window halvings; hosts/atp/README.md lists them). Two jobs'
    add key by key, except a key ending in LAST_SUFFIX (``cwnd_last``): the later job's."""


def added(total: JobStats, more: JobStats) -> JobStats:
    """Two jobs' statistics as one (a DDP step's buckets, a script's all-reduces): counts
    and times added, timelines back to back (in the first one's bins)."""
    return JobStats(**{f.name: getattr(total, f.name) if f.name == "timeline_bin_s" else _added(getattr(total, f.name), getattr(more, f.name))
                       for f in fields(JobStats)})


def _added(a: Any, b: Any) -> Any:
    if isinstance(a, dict):
        return {key: b.get(key, a.get(key)) if key.endswith(LAST_SUFFIX) else a.get(key, 0) + b.get(key, 0)
                for key in sorted(a.keys() | b.keys())}
    return a + b


class SendTimeline:
    """Counts packets sent per ``bin_s`` bin (TIMELINE_BIN_S unless given), growing as the job runs.

    Kept outside JobStats so the hot path touches one list and three floats, not a dataclass.
    """

    __slots__ = ("_t0", "_bins", "_bin_s")

    def __init__(self, t0: float, bin_s: float = TIMELINE_BIN_S) -> None:
        self._t0 = t0
        self._bins: list[int] = []
        self._bin_s = bin_s

    def record(self, now: float, packets: int = 1) -> None:
        """Add ``packets`` sent at time ``now`` (same clock as t0, e.g. time.perf_counter)."""
        index = int((now - self._t0) / self._bin_s)
        bins = self._bins
        if index >= len(bins):
            bins.extend([0] * (index + 1 - len(bins)))
        bins[index] += packets

    @property
    def bins(self) -> list[int]:
        return list(self._bins)
