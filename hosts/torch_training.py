"""The ``torch`` workload on a worker: one DistributedDataParallel step per runner command.

``hosts.worker`` hands a spec whose training section is of kind ``torch`` here. The ranks
join a Gloo process group over the emulated links (hosts/gloo_allreduce.py's
``join_gloo_group``) and wrap workloads/torch_cnn.py's model in DDP, which broadcasts rank
0's parameters once; then each released step takes this rank's minibatch (the numpy
training's shards and draws, workloads/training.py), runs forward and backward, during
which DDP all-reduces the gradient buckets, and applies the average with SGD. The
all-reduce is the method's:

- ``switchml``: the SwitchML communication hook (hosts/torch_hook.py) through the switch;
- ``gloo``: Gloo's own all-reduce, through torch's ``allreduce_hook``, which its
  documentation says gives the results of DDP without a hook (it is what DDP does by
  default), timed from the bucket's launch to the completion of Gloo's future.

The conversation is hosts/training.py's (ready, ``go <step>``, ``done``, ``exit``); a report:

    {"event": "done", "repetition": step, "stats": {...}, "compute_s": s,
     "digests": {"parameters": .., "int_sum": ..}, "buckets": "inputs.npz"}   (its buckets' gradients)
    rank 0 also: "evaluation": [loss, train accuracy, test accuracy], "parameters": "params.npy",
                 "sums": "sums.npz" (switchml: each bucket's int32 sum and float32 values;
                 gloo: each bucket's average)

so the runner verifies each bucket's all-reduce from every rank's inputs (SwitchML's
integer sums bit for bit, Gloo's within the float32 bound), checks that every rank holds
rank 0's parameters, and compares those with its exact replay. The step's statistics are
its all-reduces' (``tat_s`` their time, the rest of the step ``compute_s``): SwitchML's
from the library, Gloo's from the kernel's TCP counters of this host and the payload bytes
of this process's sockets, as the gloo method counts them.
"""

# No "from __future__ import annotations": DDP checks a hook's annotations against
# dist.GradBucket and torch.futures.Future[torch.Tensor] themselves, not their strings.

import dataclasses
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel

from hosts.events import emit
from hosts.gloo_allreduce import join_gloo_group
from hosts.stats import JobStats
from hosts.tcp_counters import TcpCounters, process_tcp_payload
from hosts.torch_hook import BucketAllReduce, SwitchMLHookState, hook_state, switchml_allreduce
from hosts.training import ARRAYS_RANK, steps
import methods
from protocol.worker_spec import WorkerSpec
from workloads.torch_cnn import batch_loss, build_model, evaluate, flat_parameters
from workloads.training import Dataset, TrainingConfig, array_digest, minibatch


class GlooTiming:
    """DDP's default all-reduce on a process group, keeping what the runner verifies: each
    bucket's input and average, and the time it took from launch to result."""

    def __init__(self, group: dist.ProcessGroup) -> None:
        self.group = group
        self.seconds: list[float] = []
        self.inputs: list[np.ndarray] = []
        self.averages: list[np.ndarray] = []

    def take(self) -> tuple[float, list[np.ndarray], list[np.ndarray]]:
        """(seconds, inputs, averages) of the buckets since the last call."""
        taken = (sum(self.seconds), self.inputs, self.averages)
        self.seconds, self.inputs, self.averages = [], [], []
        return taken


def timed_gloo_allreduce(state: GlooTiming, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    state.inputs.append(bucket.buffer().detach().numpy().copy())  # allreduce_hook divides the buffer in place
    started = time.perf_counter()

    def finished(future: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        state.seconds.append(time.perf_counter() - started)
        average = future.value()
        state.averages.append(average.detach().numpy().copy())
        return average

    return allreduce_hook(state.group, bucket).then(finished)


def switchml_stats(buckets: list[BucketAllReduce]) -> JobStats:
    """One step's statistics: its buckets' added up (their timelines back to back)."""
    total = JobStats()
    for bucket in buckets:
        for field in dataclasses.fields(JobStats):
            setattr(total, field.name, getattr(total, field.name) + getattr(bucket.stats, field.name))
    return total


def serve_torch_training(spec: WorkerSpec, rank: int, out_dir: Path) -> None:
    """Train: each released step is one DDP step whose gradients the method all-reduces."""
    training = spec.training
    if training is None:
        raise ValueError("the worker spec has no training section")
    config = TrainingConfig(**training.config)
    data = Dataset.load(Path(training.dataset))
    model = build_model(config.hidden_units, config.seed)
    group = join_gloo_group(spec, rank)
    ddp = DistributedDataParallel(model, process_group=group)
    hook: SwitchMLHookState | GlooTiming
    if spec.method == methods.SWITCHML.name:
        hook = hook_state(spec, rank)
        ddp.register_comm_hook(hook, switchml_allreduce)
    else:
        hook = GlooTiming(group)
        ddp.register_comm_hook(hook, timed_gloo_allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.learning_rate)
    try:
        emit({"event": "ready"})
        for step in steps(sys.stdin):
            x, y = minibatch(config, data, rank, spec.n_workers, step)
            counters, payload = TcpCounters.read(), process_tcp_payload()
            started = time.perf_counter()
            optimizer.zero_grad()
            batch_loss(ddp, x, y).backward()
            optimizer.step()
            step_s = time.perf_counter() - started
            params = flat_parameters(model)
            event: dict[str, Any] = {"event": "done", "repetition": step, "digests": {"parameters": array_digest(params)}}
            if isinstance(hook, SwitchMLHookState):
                buckets = hook.take()
                stats = switchml_stats(buckets)
                inputs = [b.inputs for b in buckets]
                sums = {f"int_sum{i}": b.int_sum for i, b in enumerate(buckets)} | {f"values{i}": b.values for i, b in enumerate(buckets)}
                event["digests"]["int_sum"] = array_digest(np.concatenate([b.int_sum for b in buckets]))
            else:
                seconds, inputs, averages = hook.take()
                delta, (sent, received) = TcpCounters.read() - counters, process_tcp_payload()
                stats = JobStats(tat_s=seconds, packets_sent=delta.out_segs, packets_received=delta.in_segs,
                                 retransmissions=delta.retrans_segs, timeouts=delta.timeouts, duplicates=delta.dsack_sent,
                                 bytes_sent=sent - payload[0], bytes_received=received - payload[1])
                sums = {f"average{i}": average for i, average in enumerate(averages)}
            event |= {"stats": dataclasses.asdict(stats), "compute_s": max(0.0, step_s - stats.tat_s),
                      "buckets": str(out_dir / f"{spec.method}-rank{rank}-step{step}-inputs.npz")}
            np.savez(event["buckets"], *inputs)
            if rank == ARRAYS_RANK:
                event["evaluation"] = list(evaluate(model, data))
                event["parameters"] = str(out_dir / f"{spec.method}-step{step}-params.npy")
                np.save(event["parameters"], params)
                event["sums"] = str(out_dir / f"{spec.method}-step{step}-sums.npz")
                np.savez(event["sums"], **sums)
            emit(event)
    finally:
        if isinstance(hook, SwitchMLHookState):
            hook.client.close()
        dist.destroy_process_group()
