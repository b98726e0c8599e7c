"""ATP's client of a DDP backend or hook (methods/atp.py's ``client``, hosts/torch_backend.py's
``SwitchClient``): one ``ATPClient`` for the rank's whole training, and the ranks' agreement
on a tensor the job's scale cannot carry.

Why an agreement. ATP's worker refuses a float beyond the job's bound 2^exponent (or an inf or
a NaN) before it sends anything. In a sweep that ends the run, naming the element. Under DDP
it would leave the other ranks waiting in the switch for this rank's packets. PyTorch also
promises a SUM all-reduce the IEEE sum (GradScaler looks for the inf on every rank).
SwitchML's workers learn of such a tensor from their lookahead round; ATP has no such round.
So every float32 all-reduce here carries one more int32 after the tensor: 1 from a rank that
cannot quantize its tensor (which then sends zeros in its place), 0 from the others. The
switch sums it with the rest, so every rank reads the same count at the same call. On a count
above 0 every rank raises ``RefusedTensor`` (an ``Unsummable``), and the backend takes Gloo's
IEEE sum instead. It costs four bytes an all-reduce, and one more packet only when the tensor
fills its last one. int32 tensors travel unscaled, are never refused, and carry no count.
"""

from __future__ import annotations

import logging

import numpy as np

from hosts.allreduce import Unsummable
from hosts.atp.client import ATPClient, ATPResult
from hosts.atp.method import atp_client
from hosts.stats import JobStats
from protocol.atp.quantize import dequantize_sum, quantize_tensor
from protocol.worker_spec import WorkerSpec

log = logging.getLogger(__name__)


class RefusedTensor(Unsummable):
    """A float32 all-reduce that ``ranks`` ranks could not quantize at the job's scale; every
    rank raises it at the same call, after a complete job. ``stats``: the job's statistics."""

    def __init__(self, ranks: int, stats: JobStats) -> None:
        super().__init__(ranks, stats)
        self.ranks = ranks
        self.stats = stats

    def __str__(self) -> str:
        return f"{self.ranks} rank(s) held an inf, a NaN or a value beyond the ATP job's bound 2^exponent: the switch cannot sum it"


class DDPClient:
    """``client``'s all-reduces with the ranks' refusal count (the module's docstring)."""

    def __init__(self, client: ATPClient) -> None:
        self._client = client
        self._exponent = client.parameters.exponent
        self._n_workers = client.n_workers

    def allreduce(self, array: np.ndarray) -> ATPResult:
        """``array``'s sum over the ranks (1-D float32 or int32); ``RefusedTensor`` on every rank
        when some rank's float32 tensor cannot be quantized."""
        if array.dtype == np.int32:
            return self._client.allreduce(array)
        try:
            quantized, refused = quantize_tensor(array, self._exponent, self._n_workers), 0
        except ValueError as error:
            log.warning("rank %d: %s: sending zeros; every rank will take Gloo's IEEE sum", self._client.rank, error)
            quantized, refused = np.zeros(len(array), dtype=np.int32), 1
        result = self._client.allreduce(np.append(quantized, np.int32(refused)))
        int_sum, count = result.int_sum[:-1], int(result.int_sum[-1])
        if count:
            raise RefusedTensor(count, result.stats)
        return ATPResult(values=dequantize_sum(int_sum, self._exponent, self._n_workers), int_sum=int_sum, stats=result.stats)

    def flushed(self, inputs: np.ndarray, result: ATPResult) -> int:
        return self._client.flushed(inputs, result)

    def close(self) -> None:
        self._client.close()


def ddp_client(spec: WorkerSpec, rank: int) -> DDPClient:
    """ATP's record's ``client``: rank ``rank``'s for the spec's job, kept for the whole training."""
    return DDPClient(atp_client(spec, rank))
