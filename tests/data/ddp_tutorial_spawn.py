"""PyTorch's DDP tutorial in the shape it is published, run on the CPU: ``mp.spawn`` of one
process per rank, MASTER_ADDR/MASTER_PORT set by the script to ``localhost:12355``,
``init_process_group("nccl", rank=rank, world_size=world_size)``, and ``sys.exit(main())``
(tests/test_torch_training.py runs it on the hosts, unmodified).

It trains with mixed precision's GradScaler, which relies on an overflowed step's inf being
all-reduced to every rank: at step OVERFLOW_STEP rank 0's loss is inf, DDP's bucket carries
its inf and NaN gradients, and every rank must see them, skip that step and halve its scale,
so that the ranks' parameters stay equal.
"""

from __future__ import annotations

import logging
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

log = logging.getLogger("ddp_tutorial_spawn")

WORLD_SIZE = 2
STEPS = 4
OVERFLOW_STEP = 2


def setup(rank: int, world_size: int) -> None:
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = "12355"
    dist.init_process_group("nccl", rank=rank, world_size=world_size)


def demo_basic(rank: int, world_size: int) -> None:
    logging.basicConfig(level=logging.INFO)
    setup(rank, world_size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 5))
    ddp_model = DDP(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.001)
    scaler = torch.amp.GradScaler("cpu")
    generator = torch.Generator().manual_seed(rank)
    scales = []
    for step in range(STEPS):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(ddp_model(torch.randn(20, 10, generator=generator)), torch.randn(20, 5, generator=generator))
        if step == OVERFLOW_STEP and rank == 0:
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    parameters = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.zeros_like(parameters) for _ in range(world_size)]
    dist.all_gather(gathered, parameters)
    agree = all(torch.equal(g, gathered[0]) for g in gathered)
    log.info("rank %d: scales %s; parameters agree: %s", rank, scales, agree)
    if not agree or scales[OVERFLOW_STEP] != scales[0] / 2:
        raise RuntimeError(f"rank {rank}: the overflowed step was not skipped on every rank (scales {scales}, agree {agree})")
    dist.destroy_process_group()


def main() -> int:
    mp.spawn(demo_basic, args=(WORLD_SIZE,), nprocs=WORLD_SIZE, join=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
