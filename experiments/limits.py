"""Time limits, each with the config key that sets it, and each method's deadline for one
all-reduce, derived from the method's bound unless ``limits.job_timeout_s`` sets one.

Why derived: one number cannot fit every rate (a fixed 60 s was too short for the parameter
server on bmv2's links and ten times too long on the eBPF switch's: benchmarks/README.md,
"Each method's deadline", has the measurements). So a method's deadline is
``DEADLINE_FACTOR`` times its fastest possible all-reduce (one round trip, and the elements
at its link-rate bound, methods/) plus ``DEADLINE_START_S``, which covers the start of a job
on a busy machine. Where there is no bound (unshaped links) or no size to put to it (a
user's DDP script, whose all-reduces are known only as it runs), the deadline is a stated
constant.

A config's ``limits.job_timeout_s`` is one deadline for every method; the config check
refuses one that even the method's fastest all-reduce cannot meet (experiments/config.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import methods
from protocol.params import mbps_to_bps
from topologies.model import Topology

JOB_TIMEOUT_KEY = "limits.job_timeout_s"
DEADLINE_FACTOR = 5.0
DEADLINE_START_S = 10.0
UNSHAPED_DEADLINE_S = 60.0
"""The deadline on unshaped links, where the machine, not a rate, sets the pace."""
UNSIZED_DEADLINE_S = 600.0
"""The deadline of a job whose elements are not known before it runs: a user's DDP script,
whose job is all of the script's all-reduces with its compute between them."""


@dataclass(frozen=True)
class Limit:
    """A time limit and the config key that sets it, so that a message can say what to raise;
    ``derivation`` says how a limit the config did not set was chosen."""

    key: str
    seconds: float
    derivation: str | None = None

    def describe(self) -> str:
        if self.derivation is None:
            return f"{self.key} = {self.seconds:g} s (raise it with --set {self.key}=<seconds> if the job is only slow)"
        return (f"its deadline of {self.seconds:.3g} s ({self.derivation}; set one with --set {self.key}=<seconds> "
                f"if the job is only slow)")


@dataclass(frozen=True)
class RunLimits:
    """A config's ``limits`` section, parsed once after validation: each limit a typed field
    that can give itself as a ``Limit`` with its key."""

    worker_start_s: float
    worker_exit_s: float
    job_timeout_s: float | None = None
    """One deadline for every method's all-reduce; None: each method's is derived (``job_limit``)."""

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> RunLimits:
        timeout = section.get("job_timeout_s")
        return cls(float(section["worker_start_s"]), float(section["worker_exit_s"]), None if timeout is None else float(timeout))

    def limit(self, name: str) -> Limit:
        """The limit called ``name`` ("worker_start_s") with its key, for a message that says what to raise."""
        return Limit(f"limits.{name}", getattr(self, name))


def fastest_allreduce_s(method: str, elements: int, workers: int, topology: Topology, k: int) -> float | None:
    """One round trip and ``elements`` at ``method``'s link-rate bound on ``topology``'s
    links, at each worker's share of its bottleneck (an over-subscribed uplink counts); None
    on unshaped links, which have no bound."""
    link_mbps = topology.link_mbps
    if link_mbps is None or workers < 2:
        return None
    rate_bps = mbps_to_bps(topology.worker_share_mbps(link_mbps, one_stream_per_leaf=False))
    return topology.round_trip_s + elements / methods.by_name(method).bound(rate_bps, workers, k)


def job_limit(limits: RunLimits, topology: Topology, method: str, jobs: Sequence[tuple[int, int]], k: int) -> Limit:
    """``method``'s deadline for one all-reduce of a point whose jobs are ``jobs`` ((elements,
    workers) each, all collected under one limit): the config's, else derived."""
    if limits.job_timeout_s is not None:
        return Limit(JOB_TIMEOUT_KEY, limits.job_timeout_s)
    if any(elements == 0 for elements, _ in jobs):
        return Limit(JOB_TIMEOUT_KEY, UNSIZED_DEADLINE_S, "its all-reduces are not known before it runs")
    fastest = [fastest_allreduce_s(method, elements, workers, topology, k) for elements, workers in jobs]
    if any(f is None for f in fastest):
        return Limit(JOB_TIMEOUT_KEY, UNSHAPED_DEADLINE_S, "unshaped links: no bound to derive one from")
    slowest = max(f for f in fastest if f is not None)
    return Limit(JOB_TIMEOUT_KEY, DEADLINE_FACTOR * slowest + DEADLINE_START_S,
                 f"{DEADLINE_FACTOR:g} x the {slowest:.3g} s its bound allows at {topology.link_mbps:g} Mbit/s, "
                 f"+ {DEADLINE_START_S:g} s")
