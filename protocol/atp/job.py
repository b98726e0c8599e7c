"""An ATP job's parameters: what the config's ``protocol`` section gives ATP, typed, and what
its workers' spec and its parameter server read back (protocol/worker_spec.py).

The keys every in-network protocol shares (k, pool_size, job_id) are the section's own;
ATP's keys live in its subsection ``protocol.atp`` (methods/atp.py gives their schema and
defaults), so no key of SwitchML's changes meaning. ``pool_size`` is the pool of aggregators
the job's window positions hash into: the switch's shared pool, not a partition of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from protocol.atp import params
from protocol.atp.quantize import check_exponent

SECTION = "atp"
"""ATP's subsection of the config's ``protocol`` section."""


@dataclass(frozen=True)
class ATPParameters:
    """One ATP job as its workers and its parameter server run it."""

    k: int
    pool_size: int
    """Aggregators the job's positions hash into (the switch's shared pool)."""
    job_id: int
    """ATP's app_id."""
    window: int
    """W: the positions a worker cycles through, and the most packets it has in flight."""
    exponent: int
    """2^exponent bounds |x| over the job: the fixed scale of protocol/atp/quantize.py."""
    resend_timeout_ms: float
    congestion_control: bool
    """ECN-driven AIMD of the window (off: the window stays W)."""
    ecn_threshold: int
    """Egress queue depth, in packets, from which the switch marks (0: never)."""
    data_path: str = "auto"
    """The worker loop (``protocol.data_path``): the runner's resolution of it (native or python), or the config's choice."""

    def __post_init__(self) -> None:
        if not 1 <= self.pool_size <= params.MAX_POOL_SIZE:
            raise ValueError(f"ATP's pool_size must be 1..{params.MAX_POOL_SIZE} aggregators, got {self.pool_size}")
        if not 1 <= self.window <= self.pool_size:
            raise ValueError(f"protocol.atp.window must be 1..pool_size ({self.pool_size}), got {self.window}")
        if not 0 <= self.job_id <= 0xFFFF:
            raise ValueError(f"ATP's job_id (app_id) must be 0..65535, got {self.job_id}")
        if not self.resend_timeout_ms > 0:
            raise ValueError(f"protocol.atp.resend_timeout_ms must be positive, got {self.resend_timeout_ms}")
        if self.ecn_threshold < 0:
            raise ValueError(f"protocol.atp.ecn_threshold must be >= 0, got {self.ecn_threshold}")
        check_exponent(self.exponent)

    @classmethod
    def from_config(cls, protocol: Mapping[str, Any], data_path: str | None = None) -> ATPParameters:
        """From the config's ``protocol`` section (its ``atp`` subsection filled in by the
        defaults; the window, where it names none, the smaller of DEFAULT_WINDOW and the pool,
        which it may not exceed). ``data_path``: the runner's resolution of ``protocol.data_path``
        (default: the config's choice)."""
        own = protocol[SECTION]
        pool_size = int(protocol["pool_size"])
        window = int(own["window"]) if "window" in own else min(params.DEFAULT_WINDOW, pool_size)
        return cls(k=int(protocol["k"]), pool_size=pool_size, job_id=int(protocol["job_id"]), window=window,
                   exponent=int(own["exponent"]), resend_timeout_ms=float(own["resend_timeout_ms"]), congestion_control=bool(own["congestion_control"]), ecn_threshold=int(own["ecn_threshold"]),
                   data_path=data_path or str(protocol.get("data_path", "auto")))

    @classmethod
    def read(cls, section: Mapping[str, Any]) -> ATPParameters:
        """From the worker spec's ``protocol`` (``job_section`` of one of these); a ValueError
        naming what is missing, unknown or out of range."""
        try:
            return cls(**section)
        except TypeError as exc:
            raise ValueError(f"not an ATP job's parameters ({exc})") from None

    @property
    def resend_timeout_s(self) -> float:
        return self.resend_timeout_ms / 1000.0
