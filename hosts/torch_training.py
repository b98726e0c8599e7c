"""The ``torch`` workload on a worker: one DistributedDataParallel step per runner command.

``hosts.worker`` runs ``serve_torch_training``, the torch workload's host loop (workloads/kinds/torch_training.py). The ranks
join a Gloo process group over the emulated links (hosts/gloo_allreduce.py's
``join_gloo_group``) and wrap workloads/torch_cnn.py's model in DDP, which broadcasts rank
0's parameters once; then each released step takes this rank's minibatch (the numpy
training's shards and draws, workloads/training.py), runs forward and backward, during
which DDP all-reduces the gradient buckets, and applies the average with SGD. The
all-reduce is the method's:

- an in-network method (``switchml``, ``atp``): the switch's communication hook
  (hosts/torch_hook.py) over the protocol's client, asynchronous: DDP goes on with the
  backward pass while the buckets queue on the switch;
- ``gloo``: Gloo's own all-reduce, through torch's ``allreduce_hook``, which its
  documentation says gives the results of DDP without a hook (it is what DDP does by
  default), timed from the bucket's launch to the completion of Gloo's future.

The conversation is hosts/training.py's (ready, ``go <step>``, ``done``, ``exit``); a report:

    {"event": "done", "repetition": step, "stats": {...}, "compute_s": s,
     "digests": {"parameters": .., "int_sum": ..}, "buckets": "inputs.npz"}   (its buckets' gradients)
    rank 0 also: "evaluation": [loss, train accuracy, test accuracy], "parameters": "params.npy",
                 "sums": "sums.npz" (in-network: each bucket's int32 sum and float32 values;
                 gloo: each bucket's average)

so the runner verifies each bucket's all-reduce from every rank's inputs (the switch's
integer sums bit for bit against the protocol's own quantization, Gloo's within the
float32 bound), checks that every rank holds rank 0's parameters, and compares those with
its exact replay. The step's statistics are its all-reduces' (``tat_s`` their time, the
rest of the step ``compute_s``): an in-network method's from its client, Gloo's from the kernel's TCP counters of this host and the payload bytes
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
from torch.nn.parallel import DistributedDataParallel

from hosts.events import emit, emit_ready
from hosts.gloo_allreduce import join_gloo_group
from hosts.tcp_counters import ProcessTcpMeter
from hosts.torch_hook import SwitchHookState, method_hook, step_stats
from hosts.training import ARRAYS_RANK, steps, training_inputs
from protocol.worker_spec import WorkerSpec
from workloads.torch_cnn import batch_loss, build_model, evaluate, flat_parameters
from workloads.training import array_digest, minibatch


def serve_torch_training(spec: WorkerSpec, rank: int, spec_path: Path) -> None:
    """Train: each released step is one DDP step whose gradients the method all-reduces."""
    out_dir = spec_path.parent
    config, data = training_inputs(spec)
    model = build_model(config.hidden_units, config.seed)
    group = join_gloo_group(spec, rank)
    ddp = DistributedDataParallel(model, process_group=group)
    hook, allreduce = method_hook(spec, rank, group)
    ddp.register_comm_hook(hook, allreduce)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.learning_rate)
    try:
        emit_ready()
        for step in steps(sys.stdin):
            x, y = minibatch(config, data, rank, spec.n_workers, step)
            tcp = ProcessTcpMeter()
            started = time.perf_counter()
            optimizer.zero_grad()
            batch_loss(ddp, x, y).backward()
            optimizer.step()
            step_s = time.perf_counter() - started
            params = flat_parameters(model)
            event: dict[str, Any] = {"event": "done", "repetition": step, "digests": {"parameters": array_digest(params)}}
            buckets = hook.take()
            inputs = [b.inputs for b in buckets]
            if isinstance(hook, SwitchHookState):
                stats = step_stats(buckets)
                sums = {f"int_sum{i}": b.int_sum for i, b in enumerate(buckets)} | {f"values{i}": b.values for i, b in enumerate(buckets)}
                event["digests"]["int_sum"] = array_digest(np.concatenate([b.int_sum for b in buckets]))
            else:
                stats = tcp.stats(sum(b.seconds for b in buckets))
                sums = {f"average{i}": b.values for i, b in enumerate(buckets)}
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
        if isinstance(hook, SwitchHookState):
            hook.switch.close()
        dist.destroy_process_group()
