"""A plain DDP script whose model has a parameter no step uses, so DDP runs with
``find_unused_parameters=True`` (tests/test_torch_training.py runs it on the hosts).

No line of the testbed's: torchrun's environment, ``init_process_group("gloo")``, DDP.
With unused parameters DDP all-reduces a map of the parameters each rank used (int32) every
step besides the gradient buckets.
"""

from __future__ import annotations

import argparse
import logging

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

log = logging.getLogger("ddp_unused_parameters")


class Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(16, 4)
        self.unused = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(Branches(), find_unused_parameters=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(arguments.steps):
        optimizer.zero_grad()
        model(torch.randn(8, 16, generator=generator)).square().mean().backward()
        optimizer.step()
    log.info("rank %d: %d steps, unused weight still %.4f", rank, arguments.steps, model.module.unused.weight.sum().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
