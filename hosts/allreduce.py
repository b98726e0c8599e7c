"""One rank's all-reduce, whichever the method: the interface the worker process drives.

``hosts.worker`` (a fixed tensor per repetition) and ``hosts.training`` (one gradient per
step) both build a rank's method from the spec with ``build(spec, rank)`` and call
``allreduce`` on it; SwitchML returns its raw integer sum as well, so the runner can verify
it exactly. Which class a method runs is its registry entry's ``host`` (methods/), a
"module:attribute" string resolved here: the methods package stays below the hosts.
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import numpy as np

from base.plugin import resolve
from hosts.collective import TcpCollective
from hosts.parameter_server import ParameterServerAllReduce
from hosts.ring_allreduce import RingAllReduce
from hosts.stats import JobStats
import methods
from protocol.worker_spec import WorkerSpec

Outcome = tuple[np.ndarray, np.ndarray | None, JobStats]
"""(result values, the switch's raw int32 sum or None, statistics)."""


class Unsummable(ValueError):
    """A tensor the switch cannot sum (an inf, a NaN, a value beyond what its integers carry),
    raised by every rank at the same call after a complete job, so all ranks take the same
    other route (hosts/torch_backend.py: Gloo's IEEE sum). ``stats``: the job's statistics."""

    stats: JobStats


class Method(Protocol):
    def allreduce(self, tensor: np.ndarray) -> Outcome: ...

    def close(self) -> None: ...


class BaselineMethod:
    """A TCP collective between the hosts (hosts/collective.py) with the worker's result shape."""

    collective: ClassVar[type[TcpCollective]]

    def __init__(self, spec: WorkerSpec, rank: int) -> None:
        self._impl = self.collective(list(spec.peers), rank, timeout_s=spec.job_timeout_s, connect_timeout_s=spec.connect_timeout_s)
        self._impl.connect()

    def allreduce(self, tensor: np.ndarray) -> Outcome:
        values, stats = self._impl.allreduce(tensor)
        return values, None, stats

    def close(self) -> None:
        self._impl.close()


class RingMethod(BaselineMethod):
    collective = RingAllReduce


class ParameterServerMethod(BaselineMethod):
    collective = ParameterServerAllReduce


def build(spec: WorkerSpec, rank: int) -> Method:
    """Rank ``rank`` of the spec's method: its registry entry's host class, built from the spec."""
    return resolve(methods.by_name(spec.method).host)(spec, rank)
