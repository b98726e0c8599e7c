"""A DDP communication hook that all-reduces every gradient bucket through the SwitchML switch.

PyTorch's DistributedDataParallel hands each bucket of gradients to a communication hook
(``model.register_comm_hook(state, hook)``, torch.distributed's documented extension point)
and waits for the torch Future it returns. ``switchml_allreduce`` sends the bucket's flat
float32 buffer through this host's ``SwitchMLClient`` (hosts/switchml: quantized with one
exponent per packet, retransmitted on loss, summed by the switch) and returns the sum
divided by the world size: the average DDP's own all-reduce returns. The process group DDP
is built on still serves its start-up broadcast of rank 0's parameters; every gradient goes
through the switch.

Why every rank makes the same sequence of all-reduce calls, as the SwitchML library requires
(hosts/switchml/README.md: set and seq continue from call to call): DDP assigns parameters
to buckets from the model's parameter order and sizes alone (rebuilt once after the first
iteration, from the order rank 0 saw, which it broadcasts), so ranks of the same model have
the same buckets; and its reducer launches a bucket's all-reduce only when every bucket of
lower index has been launched, so the hook sees the buckets in index order 0, 1, ... on
every rank, every step, once each (without ``find_unused_parameters`` every parameter gets a
gradient every step). The hook checks that order and refuses a bucket out of it.

The hook keeps every bucket's input, integer sum and statistics (``SwitchMLHookState.take``)
so that the testbed can verify the switch's sums bit for bit, as for any SwitchML job.

This module imports torch: only the torch-specific modules may import it.
"""

# No "from __future__ import annotations": DDP checks a hook's annotations against
# dist.GradBucket and torch.futures.Future[torch.Tensor] themselves, not their strings.

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from hosts.allreduce import switchml_client
from hosts.stats import JobStats
from hosts.switchml import SwitchMLClient
from protocol.worker_spec import WorkerSpec

SPEC_ENVIRONMENT = "SWITCHML_WORKER_SPEC"
"""The worker spec a testbed launch gives a user's script (experiments/ddp_script.py)."""


@dataclass(frozen=True)
class BucketAllReduce:
    """One bucket's all-reduce as the switch did it."""

    index: int
    inputs: np.ndarray
    """This rank's float32 gradients of the bucket (a copy)."""
    int_sum: np.ndarray
    """The switch's int32 sum of every rank's quantized gradients."""
    values: np.ndarray
    """The dequantized float32 sum (before the division by the world size)."""
    stats: JobStats


class SwitchMLHookState:
    """The hook's state: this rank's client, the world size, and the buckets reduced since the last ``take``."""

    def __init__(self, client: SwitchMLClient, world_size: int) -> None:
        self.client = client
        self.world_size = world_size
        self._next_index = 0
        self._buckets: list[BucketAllReduce] = []

    def expect(self, index: int, last: bool) -> None:
        """Refuse a bucket out of DDP's index order (the ranks' call sequences would then differ)."""
        if index != self._next_index:
            raise RuntimeError(f"DDP handed bucket {index} where bucket {self._next_index} was due: the ranks' "
                               "all-reduce calls would no longer match (hosts/torch_hook.py)")
        self._next_index = 0 if last else index + 1

    def record(self, bucket: BucketAllReduce) -> None:
        self._buckets.append(bucket)

    def take(self) -> list[BucketAllReduce]:
        """The buckets reduced since the last call (one backward pass's, if called once a step)."""
        taken, self._buckets = self._buckets, []
        return taken


def switchml_allreduce(state: SwitchMLHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's communication hook: the bucket's average over the ranks, summed by the switch."""
    buffer = bucket.buffer()
    if buffer.dtype != torch.float32:
        raise TypeError(f"the SwitchML hook all-reduces float32 gradients, got a bucket of {buffer.dtype}")
    state.expect(bucket.index(), bucket.is_last())
    gradients = buffer.detach().numpy().copy()
    result = state.client.allreduce(gradients)
    state.record(BucketAllReduce(bucket.index(), gradients, result.int_sum, result.values, result.stats))
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(torch.from_numpy(result.values / np.float32(state.world_size)))
    return future


def hook_state(spec: WorkerSpec, rank: int) -> SwitchMLHookState:
    """The hook's state for ``rank`` of the job a worker spec describes."""
    return SwitchMLHookState(switchml_client(spec, rank), spec.n_workers)


Hook = Callable[[SwitchMLHookState, dist.GradBucket], torch.futures.Future[torch.Tensor]]


def testbed_hook() -> tuple[SwitchMLHookState, Hook]:
    """(state, hook) for ``model.register_comm_hook(*testbed_hook())`` in a script the
    testbed launched on an emulated host (experiments/ddp_script.py sets the environment)."""
    try:
        spec_path, rank = os.environ[SPEC_ENVIRONMENT], int(os.environ["RANK"])
    except KeyError as missing:
        raise RuntimeError(f"{missing} is not set: run the script with python -m experiments.ddp_script") from None
    return hook_state(WorkerSpec.read(Path(spec_path)), rank), switchml_allreduce
