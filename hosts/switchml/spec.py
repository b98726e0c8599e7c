"""A SwitchML job as the worker spec gives it: its parameters and its retransmission policy.

Every driver of the worker core builds its worker from these: the socket client's method
(method.py) and the simulated clock's (simulation/switchml/driver.py), which needs nothing of the
socket client.
"""

from __future__ import annotations

import methods
from hosts.switchml.timers import RetransmitPolicy, pool_drain_s
from protocol.params import mbps_to_bps
from protocol.worker_spec import SwitchMLParameters, WorkerSpec


def spec_parameters(spec: WorkerSpec) -> SwitchMLParameters:
    """The spec's SwitchML job: what every worker of it is built from, on a host (the client)
    or on the simulated clock (simulation/switchml/driver.py)."""
    if spec.protocol is None:
        raise ValueError(f"method {spec.method}'s spec has no protocol section (its record names no aggregation): no SwitchML job to join")
    return methods.by_name(spec.method).aggregation.read_parameters(spec.protocol)


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
