"""SwitchML's worker as a method of the testbed: the class its record names as ``host``
(methods/switchml.py), the client a DDP hook or backend joins the job with, and the
retransmission policy a spec's parameters and link rate give.

``hosts.allreduce.build`` builds a rank's method from the spec, whichever it is; this is
SwitchML's, in its own folder, so nothing outside hosts/switchml/ needs to know its client.
"""

from __future__ import annotations

import numpy as np

import methods
from hosts.allreduce import Outcome
from hosts.switchml.client import SwitchMLClient
from hosts.switchml.timers import RetransmitPolicy, pool_drain_s
from protocol.params import mbps_to_bps
from protocol.worker_spec import SwitchMLParameters, WorkerSpec


class SwitchMLMethod:
    """SwitchMLClient with the worker's result shape."""

    def __init__(self, spec: WorkerSpec, rank: int) -> None:
        self._client = switchml_client(spec, rank)

    def allreduce(self, tensor: np.ndarray) -> Outcome:
        result = self._client.allreduce(tensor)
        return result.values, result.int_sum, result.stats

    def close(self) -> None:
        self._client.close()


def spec_parameters(spec: WorkerSpec) -> SwitchMLParameters:
    """The spec's SwitchML job: what every worker of it is built from, on a host (the client)
    or on the simulated clock (simulation/switchml.py)."""
    if spec.protocol is None:
        raise ValueError(f"method {spec.method}'s spec has no protocol section (its record names no aggregation): no SwitchML job to join")
    return methods.by_name(spec.method).aggregation.read_parameters(spec.protocol)


def switchml_client(spec: WorkerSpec, rank: int) -> SwitchMLClient:
    """Rank ``rank``'s SwitchML client for the spec's job: the method's, and the DDP hook's (hosts/torch_hook.py)."""
    proto = spec_parameters(spec)
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
    if protocol.fixed_timeout_ms is not None:
        return RetransmitPolicy.fixed_at(protocol.fixed_timeout_ms / 1000.0)
    floor_s = protocol.timeout_ms / 1000.0
    if link_mbps is not None:
        floor_s = max(floor_s, 2 * pool_drain_s(protocol.pool_size, protocol.k, mbps_to_bps(link_mbps)))
    return RetransmitPolicy(min_s=floor_s, backoff_every=protocol.backoff_every, max_s=max(1.0, floor_s))
