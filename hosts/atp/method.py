"""ATP's worker as a method of the testbed: the class its record names as ``host``
(methods/atp.py), built by ``hosts.allreduce.build`` as ``cls(spec, rank)``.

The spec gives the job's parameters (``protocol``), the switch's address (where results come
from) and the job's parameter server (``servers[0]``: the host the network attached for it).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import methods
from hosts.allreduce import Outcome
from hosts.atp.client import ATPClient
from protocol.atp import params
from protocol.atp.job import ATPParameters
from protocol.atp.packet import frame_bytes
from protocol.worker_spec import WorkerSpec


class ATPMethod:
    """ATPClient with the worker's result shape."""

    def __init__(self, spec: WorkerSpec, rank: int) -> None:
        if spec.protocol is None:
            raise ValueError(f"method {spec.method}'s spec has no protocol section: no ATP job to join")
        if not spec.servers:
            raise ValueError(f"method {spec.method}'s spec names no parameter server (servers): ATP needs one per job")
        parameters = resend_floor(methods.by_name(spec.method).aggregation.read_parameters(spec.protocol), spec.link_mbps)
        self._client = ATPClient(rank, spec.n_workers, parameters, (spec.servers[0], params.PS_UDP_PORT),
                                 (spec.switch_ipv4, params.SWITCH_UDP_PORT), job_deadline_s=spec.job_timeout_s)

    def allreduce(self, tensor: np.ndarray) -> Outcome:
        result = self._client.allreduce(tensor)
        return result.values, result.int_sum, result.stats

    def close(self) -> None:
        self._client.close()


def resend_floor(parameters: ATPParameters, link_mbps: float | None) -> ATPParameters:
    """The job's parameters with the resend timeout raised, on rate-limited links, to twice
    the time a full window of frames takes to cross the slowest link (SwitchML's floor,
    hosts/switchml/method.py): below it a worker's own queue makes its last packets look
    lost, and it resends a window it just sent."""
    if link_mbps is None:
        return parameters
    window_drain_ms = parameters.window * 8 * frame_bytes(parameters.k) / (link_mbps * 1e3)
    return replace(parameters, resend_timeout_ms=max(parameters.resend_timeout_ms, 2 * window_drain_ms))
