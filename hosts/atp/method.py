"""ATP's worker as a method of the testbed: the class its record names as ``host``
(methods/atp.py), built by ``hosts.allreduce.build`` as ``cls(spec, rank)``, and the client
it and a DDP backend or hook (hosts/atp/ddp_client.py) join the job with.

The spec gives the job's parameters (``protocol``), the switch's address (where results come
from) and the job's parameter server (``servers[0]``: the host the network attached for it).
"""

from __future__ import annotations

import numpy as np

from hosts.allreduce import Outcome
from hosts.atp.client import ATPClient
from hosts.atp.job import job_parameters, resend_floor
from protocol.atp import params
from protocol.worker_spec import WorkerSpec


class ATPMethod:
    """ATPClient with the worker's result shape."""

    def __init__(self, spec: WorkerSpec, rank: int) -> None:
        self._client = atp_client(spec, rank)

    def allreduce(self, tensor: np.ndarray) -> Outcome:
        result = self._client.allreduce(tensor)
        return result.values, result.int_sum, result.stats

    def close(self) -> None:
        self._client.close()


def atp_client(spec: WorkerSpec, rank: int) -> ATPClient:
    """Rank ``rank``'s client of the spec's ATP job: the method's, and under the DDP backend's
    and hook's (hosts/atp/ddp_client.py), which keep it for the whole training."""
    parameters = resend_floor(job_parameters(spec, needs_server=True), spec.link_mbps)
    return ATPClient(rank, spec.n_workers, parameters, (spec.servers[0], params.PS_UDP_PORT),
                     (spec.switch_ipv4, params.SWITCH_UDP_PORT), job_deadline_s=spec.job_timeout_s,
                     data_path=parameters.data_path, link_mbps=spec.link_mbps)
