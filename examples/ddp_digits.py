"""A DDP training script of the kind a user brings, run on the testbed's hosts through the switch.

    .venv/bin/python run_experiment.py configs/ddp_script.yaml --set workload.script=examples/ddp_digits.py

Nothing in it is the testbed's but the hook: an ordinary torch.distributed script (an MLP
on scikit-learn's digits, each rank its own shard, plain SGD) plus the two marked lines.
The testbed starts one copy per emulated host with the environment torchrun gives (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, ...), and
``testbed_hook()`` hands DDP the SwitchML hook (or, for the run's gloo method, Gloo's own
all-reduce). The two lines are optional (examples/ddp_tutorial.py has none, and ``--no-hook``
skips the hook here: the process group's backend then takes the buckets); this script shows
the hook API. Its output goes to
each rank's log in the run's ``logs/``.
"""

from __future__ import annotations

import argparse
import logging
import os

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from hosts.torch_hook import testbed_hook  # testbed

log = logging.getLogger("ddp_digits")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--no-hook", action="store_true", help="leave DDP's buckets to the process group's backend")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO)
    torch.set_num_threads(1)

    dist.init_process_group("gloo")  # env:// rendezvous
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])  # as torchrun sets them
    log.info("rank %d of %d, local rank %d of %d", rank, world, local_rank, local_world)
    digits = load_digits()
    x = torch.tensor(digits.data / 16.0, dtype=torch.float32)
    y = torch.tensor(digits.target)
    test = torch.arange(len(y)) % 5 == 0
    x_train, y_train = x[~test][rank::world], y[~test][rank::world]

    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)))
    if not args.no_hook:
        model.register_comm_hook(*testbed_hook())  # testbed: every gradient bucket through the switch
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    generator = torch.Generator().manual_seed(rank)
    for _ in range(args.steps):
        batch = torch.randint(len(y_train), (args.batch_size,), generator=generator)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x_train[batch]), y_train[batch]).backward()
        optimizer.step()
    with torch.no_grad():
        accuracy = (model(x[test]).argmax(dim=1) == y[test]).float().mean().item()
    log.info("rank %d: test accuracy %.4f after %d steps", rank, accuracy, args.steps)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
