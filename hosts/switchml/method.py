"""SwitchML's worker as a method of the testbed: the class its record names as ``host``
(methods/switchml.py), and the client a DDP hook or backend joins the job with, built from
the spec's job and retransmission policy (spec.py).

``hosts.allreduce.build`` builds a rank's method from the spec, whichever it is; this is
SwitchML's, in its own folder, so nothing outside hosts/switchml/ needs to know its client.
"""

from __future__ import annotations

import numpy as np

from hosts.allreduce import Outcome
from hosts.switchml.client import SwitchMLClient
from hosts.switchml.spec import retransmit_policy, spec_parameters
from protocol.worker_spec import WorkerSpec


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
