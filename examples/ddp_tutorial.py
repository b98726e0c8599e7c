"""A plain DDP training script in the shape of PyTorch's DDP tutorial, with no line of the testbed's.

    .venv/bin/python run_experiment.py configs/ddp_script.yaml --set workload.script=examples/ddp_tutorial.py

It is what torchrun would start on each node: ``init_process_group("gloo")`` from the
environment (env://), the rank's shard from a ``DistributedSampler``, the model wrapped in
``DistributedDataParallel``, SGD, ``destroy_process_group``. Under the testbed
(workload kind ddp_script) the run's method decides where its collectives go: for
``switchml`` its process group is the testbed's switchml backend, so DDP's gradient
buckets cross the switch although the script asked for Gloo (hosts/ddp_script.py).
"""

from __future__ import annotations

import argparse
import logging
import os

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

log = logging.getLogger("ddp_tutorial")


class ToyModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net1 = nn.Linear(64, 128)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net2(self.relu(self.net1(x)))


def setup() -> None:
    dist.init_process_group("gloo")


def cleanup() -> None:
    dist.destroy_process_group()


def train(epochs: int, batch_size: int) -> None:
    setup()
    rank, world = dist.get_rank(), dist.get_world_size()
    log.info("rank %d of %d, local rank %s", rank, world, os.environ["LOCAL_RANK"])
    digits = load_digits()
    dataset = TensorDataset(torch.tensor(digits.data / 16.0, dtype=torch.float32), torch.tensor(digits.target))
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=batch_size, sampler=sampler)
    torch.manual_seed(0)
    ddp_model = DDP(ToyModel())
    loss_fn = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2)
        for inputs, labels in loader:
            optimizer.zero_grad()
            loss = loss_fn(ddp_model(inputs), labels)
            loss.backward()
            optimizer.step()
            total += torch.tensor([loss.item() * len(labels), len(labels)])
        dist.all_reduce(total)  # the epoch's mean loss over every rank
        log.info("rank %d: epoch %d, mean loss %.4f", rank, epoch, (total[0] / total[1]).item())
    cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    arguments = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    train(arguments.epochs, arguments.batch_size)
