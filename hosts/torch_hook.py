"""DDP communication hooks that all-reduce every gradient bucket through the switch, or through Gloo.

PyTorch's DistributedDataParallel hands each bucket of gradients to a communication hook
(``model.register_comm_hook(state, hook)``, torch.distributed's documented extension point)
and waits for the torch Future it returns. ``switch_allreduce`` submits the bucket's flat
float32 buffer to this rank's ``SwitchQueue`` (hosts/torch_backend.py: one thread running
the in-network protocol's client's all-reduces in order, its record's ``client``: quantized,
retransmitted on loss, summed by the switch) and returns at once a Future that completes
with the sum divided by the world size, the average DDP's own all-reduce returns. So the
backward pass goes on computing the next buckets' gradients while the switch sums this
one, and the buckets queue behind each other. The process group DDP is built on still
serves its start-up broadcast of rank 0's parameters; every gradient goes through the switch.

Why every rank submits the same sequence of all-reduces, as an in-network job's workers
must (their packets' sequence numbers continue from call to call): DDP assigns parameters
to buckets from the model's parameter order and sizes alone (rebuilt once after the first
iteration, from the order rank 0 saw, which it broadcasts), so ranks of the same model have
the same buckets; and its reducer launches a bucket's all-reduce only when every bucket of
lower index has been launched, so the hook sees the buckets in index order 0, 1, ... on
every rank, every step, once each (without ``find_unused_parameters`` every parameter gets a
gradient every step). The hook checks that order as it launches and refuses a bucket out
of it; the queue keeps it.

A ``HookState`` keeps every bucket's input, sum and statistics until ``take`` (the torch
workload verifies each step's from them), in index order whatever order the buckets
completed in. ``gloo_allreduce`` is its Gloo counterpart for the testbed's comparisons:
torch's own ``allreduce_hook`` (which its documentation says gives the results of DDP
without a hook: it is what DDP does by default), timed.

``testbed_hook`` gives a user's script (hosts/ddp_script.py) the hook of the run's method
over the script's default process group, whose backend (hosts/torch_backend.py) already
records what it all-reduces: its state keeps nothing.

This module imports torch: only the torch-specific modules may import it.
"""

# No "from __future__ import annotations": DDP checks a hook's annotations against
# dist.GradBucket and torch.futures.Future[torch.Tensor] themselves, not their strings.

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from base.plugin import resolve
from hosts.stats import JobStats, added
from hosts.torch_backend import Reduction, SwitchProcessGroup, SwitchQueue, switch_client
import methods
from protocol.worker_spec import WorkerSpec

Hook = Callable[[Any, dist.GradBucket], torch.futures.Future[torch.Tensor]]
"""A DDP communication hook: (state, bucket) -> the future of the bucket's reduced gradients."""
SPEC_ENVIRONMENT = "SWITCHML_WORKER_SPEC"
"""The worker spec a testbed launch gives a user's script (hosts/ddp_script.py)."""


@dataclass(frozen=True, kw_only=True)
class BucketAllReduce(Reduction):
    """One bucket's all-reduce on this rank: a ``Reduction`` of its float32 gradients (a
    copy) and its place in DDP's order; Gloo's ``values`` are the average DDP's own hook
    returns, the switch's the sum before the division by the world size."""

    index: int


class HookState:
    """What a hook keeps: DDP's bucket order, checked as buckets launch, and the buckets
    reduced since the last ``take`` (none when ``keep`` is False: a user's script, whose
    process group records its all-reduces itself and never calls ``take``)."""

    def __init__(self, world_size: int, keep: bool = True) -> None:
        self.world_size = world_size
        self.keep = keep
        self._next_index = 0
        self._buckets: list[BucketAllReduce] = []
        self._lock = threading.Lock()
        """Buckets complete on the switch queue's or Gloo's threads."""

    def expect(self, index: int, last: bool) -> None:
        """Refuse a bucket out of DDP's index order (the ranks' call sequences would then differ)."""
        if index != self._next_index:
            raise RuntimeError(f"DDP handed bucket {index} where bucket {self._next_index} was due: the ranks' "
                               "all-reduce calls would no longer match (hosts/torch_hook.py)")
        self._next_index = 0 if last else index + 1

    def record(self, bucket: BucketAllReduce) -> None:
        if self.keep:
            with self._lock:
                self._buckets.append(bucket)

    def take(self) -> list[BucketAllReduce]:
        """The buckets reduced since the last call, in index order (one backward pass's, if called once a step)."""
        with self._lock:
            taken, self._buckets = self._buckets, []
        return sorted(taken, key=lambda bucket: bucket.index)


class SwitchHookState(HookState):
    """The switch's hook's state: this rank's queue of all-reduces through the switch."""

    def __init__(self, switch: SwitchQueue, world_size: int, keep: bool = True) -> None:
        super().__init__(world_size, keep)
        self.switch = switch


class GlooHookState(HookState):
    """The Gloo hook's state: the process group DDP's default all-reduce runs on."""

    def __init__(self, group: dist.ProcessGroup, world_size: int, keep: bool = True) -> None:
        super().__init__(world_size, keep)
        self.group = group


def step_stats(buckets: list[BucketAllReduce]) -> JobStats:
    """The switch client's statistics of some buckets (one step's), added up."""
    total = JobStats()
    for bucket in buckets:
        if bucket.stats is not None:
            total = added(total, bucket.stats)
    return total


def switch_allreduce(state: SwitchHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's communication hook: the future of the bucket's average over the ranks, summed by the switch."""
    buffer = bucket.buffer()
    if buffer.dtype != torch.float32:
        raise TypeError(f"the switch's hook all-reduces float32 gradients, got a bucket of {buffer.dtype}")
    index = bucket.index()
    state.expect(index, bucket.is_last())

    def averaged(future: torch.futures.Future[Reduction]) -> torch.Tensor:
        reduction = future.value()
        state.record(BucketAllReduce(reduction.inputs, reduction.values, reduction.seconds, reduction.int_sum, reduction.stats, index=index))
        return torch.from_numpy(reduction.values / np.float32(state.world_size))

    return state.switch.submit(buffer.detach().numpy()).then(averaged)


def gloo_allreduce(state: GlooHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (torch's ``allreduce_hook``) on Gloo, timed from launch to result."""
    state.expect(bucket.index(), bucket.is_last())
    index, gradients = bucket.index(), bucket.buffer().detach().numpy().copy()  # allreduce_hook divides in place
    started = time.perf_counter()

    def finished(future: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        average = future.value()
        state.record(BucketAllReduce(gradients, average.detach().numpy().copy(), time.perf_counter() - started, index=index))
        return average

    return allreduce_hook(state.group, bucket).then(finished)


def switch_hook(spec: WorkerSpec, rank: int, group: dist.ProcessGroup, keep: bool) -> tuple[HookState, Hook]:
    """An in-network method's DDP hook (its ``Method.ddp_hook``): buckets through the switch,
    on the queue of ``group`` when it is the method's process group (one client per rank), else
    on one of its own over the client its record's ``client`` builds."""
    if isinstance(group, SwitchProcessGroup) and group.switch is not None:
        switch = group.switch
    else:
        switch = SwitchQueue(switch_client(spec, rank))
    return SwitchHookState(switch, spec.n_workers, keep), switch_allreduce


def gloo_hook(spec: WorkerSpec, rank: int, group: dist.ProcessGroup, keep: bool) -> tuple[HookState, Hook]:
    """The gloo method's DDP hook: DDP's own all-reduce on ``group``, timed."""
    return GlooHookState(group, spec.n_workers, keep), gloo_allreduce


def method_hook(spec: WorkerSpec, rank: int, group: dist.ProcessGroup, keep: bool = True) -> tuple[HookState, Hook]:
    """(state, hook) of the spec's method, as its record's ``ddp_hook`` names them."""
    reference = methods.by_name(spec.method).ddp_hook
    if reference is None:
        raise ValueError(f"method {spec.method} has no DDP hook (methods/{spec.method}.py: ddp_hook)")
    return resolve(reference)(spec, rank, group, keep)


def testbed_hook() -> tuple[HookState, Hook]:
    """(state, hook) for ``model.register_comm_hook(*testbed_hook())`` in a user's DDP script
    that the testbed runs on an emulated host (workload kind ddp_script, hosts/ddp_script.py),
    after ``torch.distributed.init_process_group``: the switch's hook on the default group's
    switch queue, or Gloo's own all-reduce when the run's method is gloo. A script without
    it runs the same way through its process group's backend; the hook is for those who
    want the switch's all-reduce behind DDP's hook API."""
    try:
        spec_path, rank = os.environ[SPEC_ENVIRONMENT], int(os.environ["RANK"])
    except KeyError as missing:
        raise RuntimeError(f"{missing} is not set: run the script as a testbed workload (kind ddp_script)") from None
    return method_hook(WorkerSpec.read(Path(spec_path)), rank, dist.group.WORLD, keep=False)
