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

The hook keeps every bucket's input, integer sum and statistics (``HookState.take``) so
that the testbed can verify the switch's sums bit for bit, as for any SwitchML job.
``gloo_allreduce`` is its Gloo counterpart for the testbed's comparisons: torch's own
``allreduce_hook`` (which its documentation says gives the results of DDP without a hook:
it is what DDP does by default), timed, keeping each bucket's input and average.

This module imports torch: only the torch-specific modules may import it.
"""

# No "from __future__ import annotations": DDP checks a hook's annotations against
# dist.GradBucket and torch.futures.Future[torch.Tensor] themselves, not their strings.

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from base.plugin import resolve
from hosts.allreduce import switchml_client
from hosts.stats import JobStats
from hosts.switchml import SwitchMLClient
import methods
from protocol.worker_spec import WorkerSpec

Hook = Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]]
"""A DDP communication hook: (state, bucket) -> the future of the bucket's reduced gradients."""
SPEC_ENVIRONMENT = "SWITCHML_WORKER_SPEC"
"""The worker spec a testbed launch gives a user's script (hosts/ddp_script.py)."""


@dataclass(frozen=True)
class BucketAllReduce:
    """One bucket's all-reduce on this rank."""

    index: int
    inputs: np.ndarray
    """This rank's float32 gradients of the bucket (a copy)."""
    values: np.ndarray
    """SwitchML: the dequantized float32 sum (before the division by the world size); Gloo: the average."""
    seconds: float
    """From handing the bucket over to its result."""
    int_sum: np.ndarray | None = None
    """SwitchML: the switch's int32 sum of every rank's quantized gradients."""
    stats: JobStats | None = None
    """SwitchML: the worker library's statistics of the bucket's job."""


class HookState:
    """What a hook keeps: DDP's bucket order, checked, and the buckets reduced since the last ``take``.

    With ``keep_last_pass`` (a user's script, which never calls ``take``) only the last
    backward pass's buckets are kept, so memory does not grow with the steps; ``seconds``
    and ``elements`` count every bucket either way.
    """

    def __init__(self, world_size: int, keep_last_pass: bool = False) -> None:
        self.world_size = world_size
        self.keep_last_pass = keep_last_pass
        self.seconds = 0.0
        self.elements = 0
        self._next_index = 0
        self._buckets: list[BucketAllReduce] = []

    def expect(self, index: int, last: bool) -> None:
        """Refuse a bucket out of DDP's index order (the ranks' call sequences would then differ)."""
        if index != self._next_index:
            raise RuntimeError(f"DDP handed bucket {index} where bucket {self._next_index} was due: the ranks' "
                               "all-reduce calls would no longer match (hosts/torch_hook.py)")
        self._next_index = 0 if last else index + 1

    def record(self, bucket: BucketAllReduce) -> None:
        if self.keep_last_pass and bucket.index == 0:
            self._buckets = []
        self._buckets.append(bucket)
        self.seconds += bucket.seconds
        self.elements += bucket.inputs.size

    def take(self) -> list[BucketAllReduce]:
        """The buckets reduced since the last call (one backward pass's, if called once a step)."""
        taken, self._buckets = self._buckets, []
        return taken


class SwitchMLHookState(HookState):
    """The SwitchML hook's state: this rank's client of the switch."""

    def __init__(self, client: SwitchMLClient, world_size: int, keep_last_pass: bool = False) -> None:
        super().__init__(world_size, keep_last_pass)
        self.client = client
        self.stats = JobStats()
        """Every bucket's library statistics added up (timelines back to back)."""

    def record(self, bucket: BucketAllReduce) -> None:
        super().record(bucket)
        self.stats = added(self.stats, bucket.stats)


class GlooHookState(HookState):
    """The Gloo hook's state: the process group DDP's default all-reduce runs on."""

    def __init__(self, group: dist.ProcessGroup, world_size: int, keep_last_pass: bool = False) -> None:
        super().__init__(world_size, keep_last_pass)
        self.group = group


def added(total: JobStats, more: JobStats) -> JobStats:
    """Two jobs' statistics as one: counts and times added, timelines back to back."""
    return JobStats(**{field.name: getattr(total, field.name) + getattr(more, field.name) for field in fields(JobStats)})


def switchml_allreduce(state: SwitchMLHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's communication hook: the bucket's average over the ranks, summed by the switch."""
    buffer = bucket.buffer()
    if buffer.dtype != torch.float32:
        raise TypeError(f"the SwitchML hook all-reduces float32 gradients, got a bucket of {buffer.dtype}")
    state.expect(bucket.index(), bucket.is_last())
    gradients = buffer.detach().numpy().copy()
    result = state.client.allreduce(gradients)
    state.record(BucketAllReduce(bucket.index(), gradients, result.values, result.stats.tat_s, result.int_sum, result.stats))
    future: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    future.set_result(torch.from_numpy(result.values / np.float32(state.world_size)))
    return future


def gloo_allreduce(state: GlooHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (torch's ``allreduce_hook``) on Gloo, timed from launch to result."""
    state.expect(bucket.index(), bucket.is_last())
    index, gradients = bucket.index(), bucket.buffer().detach().numpy().copy()  # allreduce_hook divides in place
    started = time.perf_counter()

    def finished(future: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        average = future.value()
        state.record(BucketAllReduce(index, gradients, average.detach().numpy().copy(), time.perf_counter() - started))
        return average

    return allreduce_hook(state.group, bucket).then(finished)


def switchml_hook(spec: WorkerSpec, rank: int, group: dist.ProcessGroup, keep_last_pass: bool) -> tuple[HookState, Hook]:
    """The SwitchML method's DDP hook (its ``Method.ddp_hook``): buckets through the switch."""
    return SwitchMLHookState(switchml_client(spec, rank), spec.n_workers, keep_last_pass), switchml_allreduce


def gloo_hook(spec: WorkerSpec, rank: int, group: dist.ProcessGroup, keep_last_pass: bool) -> tuple[HookState, Hook]:
    """The gloo method's DDP hook: DDP's own all-reduce on ``group``, timed."""
    return GlooHookState(group, spec.n_workers, keep_last_pass), gloo_allreduce


def method_hook(spec: WorkerSpec, rank: int, group: dist.ProcessGroup, keep_last_pass: bool = False) -> tuple[HookState, Hook]:
    """(state, hook) of the spec's method, as its record's ``ddp_hook`` names them."""
    reference = methods.by_name(spec.method).ddp_hook
    if reference is None:
        raise ValueError(f"method {spec.method} has no DDP hook (methods/{spec.method}.py: ddp_hook)")
    return resolve(reference)(spec, rank, group, keep_last_pass)


ACTIVE: list[HookState] = []
"""The state ``testbed_hook`` handed out in this process, for hosts/ddp_script.py to report."""


def testbed_hook() -> tuple[HookState, Hook]:
    """(state, hook) for ``model.register_comm_hook(*testbed_hook())`` in a user's DDP script
    that the testbed runs on an emulated host (workload kind ddp_script, hosts/ddp_script.py):
    the SwitchML hook, or Gloo's own all-reduce when the run's method is gloo, after
    ``torch.distributed.init_process_group("gloo")``."""
    try:
        spec_path, rank = os.environ[SPEC_ENVIRONMENT], int(os.environ["RANK"])
    except KeyError as missing:
        raise RuntimeError(f"{missing} is not set: run the script as a testbed workload (kind ddp_script)") from None
    state, hook = method_hook(WorkerSpec.read(Path(spec_path)), rank, dist.group.WORLD, keep_last_pass=True)
    ACTIVE.append(state)
    return state, hook
