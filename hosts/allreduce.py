"""One rank's all-reduce, whichever the method: the interface the worker process drives.

``hosts.worker`` (a fixed tensor per repetition) and ``hosts.training`` (one gradient per
step) both build a rank's method from the spec with ``build(spec, rank)`` and call
``allreduce`` on it; SwitchML returns its raw integer sum as well, so the runner can verify
it exactly. Which class a method runs is its registry entry's ``host`` (methods/), a
"module:attribute" string resolved here: the methods package stays below the hosts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Protocol

import numpy as np

from base.plugin import resolve
from hosts.collective import TcpCollective
from hosts.parameter_server import ParameterServerAllReduce
from hosts.ring_allreduce import RingAllReduce
from hosts.stats import JobStats
import methods
from protocol.params import mbps_to_bps
from protocol.worker_spec import SwitchMLParameters, WorkerSpec

if TYPE_CHECKING:
    from hosts.switchml.client import SwitchMLClient
    from hosts.switchml.timers import RetransmitPolicy

Outcome = tuple[np.ndarray, np.ndarray | None, JobStats]
"""(result values, SwitchML's raw int32 sum or None, statistics)."""


class Method(Protocol):
    def allreduce(self, tensor: np.ndarray) -> Outcome: ...

    def close(self) -> None: ...


class SwitchMLMethod:
    """SwitchMLClient with the worker's result shape."""

    def __init__(self, spec: WorkerSpec, rank: int) -> None:
        self._client = switchml_client(spec, rank)

    def allreduce(self, tensor: np.ndarray) -> Outcome:
        result = self._client.allreduce(tensor)
        return result.values, result.int_sum, result.stats

    def close(self) -> None:
        self._client.close()


def switchml_client(spec: WorkerSpec, rank: int) -> SwitchMLClient:
    """Rank ``rank``'s SwitchML client for the spec's job: the method's, and the DDP hook's (hosts/torch_hook.py)."""
    from hosts.switchml.client import SwitchMLClient

    if spec.protocol is None:
        raise ValueError(f"method {spec.method}'s spec has no protocol section (its record names no aggregation): no SwitchML job to join")
    proto = methods.by_name(spec.method).aggregation.read_parameters(spec.protocol)
    return SwitchMLClient(
        rank=rank,
        n_workers=spec.n_workers,
        job_id=proto.job_id,
        switch_ipv4=spec.switch_ipv4,
        k=proto.k,
        pool_size=proto.pool_size,
        retransmit=retransmit_policy(proto, spec.link_mbps),
        job_deadline_s=spec.job_timeout_s,
        data_path=proto.data_path,
    )


def retransmit_policy(protocol: SwitchMLParameters, link_mbps: float | None) -> RetransmitPolicy:
    """The config's timeout floor (``timeout_ms``), raised to twice the time a full pool takes
    to cross the slowest link when links are rate-limited (hosts/switchml/timers.py: under
    loss the measured round trips fall below it just before the pool refills); or the
    config's fixed timeout (``fixed_timeout_ms``: loss-free links)."""
    from hosts.switchml.timers import RetransmitPolicy, pool_drain_s

    if protocol.fixed_timeout_ms is not None:
        return RetransmitPolicy.fixed_at(protocol.fixed_timeout_ms / 1000.0)
    floor_s = protocol.timeout_ms / 1000.0
    if link_mbps is not None:
        floor_s = max(floor_s, 2 * pool_drain_s(protocol.pool_size, protocol.k, mbps_to_bps(link_mbps)))
    return RetransmitPolicy(min_s=floor_s, backoff_every=protocol.backoff_every, max_s=max(1.0, floor_s))


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
