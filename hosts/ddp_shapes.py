"""The shapes of DDP script the testbed runs unmodified, and one-line refusals for the rest.

A user's script (hosts/ddp_script.py) runs on every emulated host as that host's one rank,
with torchrun's environment. Scripts meet their ranks in a few common ways, and each is made
to meet them through the testbed's rendezvous and the run's method while the script runs:

- ``init_process_group`` asking for Gloo, for no backend, or for an in-network backend
  (``switchml``, ``atp``) builds the method's backend (hosts/torch_backend.py). Asking for NCCL does too on a host without
  CUDA (every emulated host here): torch's NCCL needs GPUs, and a script that asks for it
  but keeps its tensors on the CPU then runs as it would with Gloo, as the p4app plugin falls
  back to Gloo. On a host with CUDA it is refused: GPU tensors would never cross the switch.
- A script that sets MASTER_ADDR/MASTER_PORT itself (the tutorial's ``localhost:12355``),
  or passes ``init_method="tcp://..."``, would meet only the ranks of its own host: the
  testbed's rendezvous (rank 0's emulated address) replaces it, said in the log. A ``rank``
  or ``world_size`` other than the testbed's is refused; a ``store`` of its own too.
- ``torch.multiprocessing.spawn(fn, args, nprocs)`` (the tutorial's ``mp.spawn``) starts
  every rank on one machine. Here each host plays the one process that spawn would have
  started for its rank: ``fn(RANK, *args)``, in this process, when ``nprocs`` is the world
  size; other counts are refused.

This module imports torch: only the torch-specific modules may import it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing
from torch.distributed import distributed_c10d

from hosts.torch_backend import SWITCH_BACKENDS

log = logging.getLogger(__name__)

REPLACED = {"gloo", *SWITCH_BACKENDS}
"""Backends a script may ask for that the method's backend replaces (none asked is Gloo on a CPU host)."""
REPLACED_WITHOUT_CUDA = REPLACED | {"nccl"}
"""Those, on a host without CUDA, where torch has no NCCL to give."""


@dataclass(frozen=True)
class Rendezvous:
    """Where this host's rank meets the others: the testbed's, as script_environment gives it."""

    rank: int
    world_size: int
    master_addr: str
    master_port: str


def backend_for(asked: object, method_backend: str, cuda: bool) -> object:
    """The backend the script's ``init_process_group(asked)`` builds under the method
    (``asked`` as torch takes it: None, ``"gloo"``, ``"cpu:gloo,cuda:nccl"``, a Backend)."""
    if asked is None:
        return method_backend
    names = {part.rpartition(":")[2].strip().lower() for part in str(asked).split(",")}
    if names <= REPLACED:
        return method_backend
    if names <= REPLACED_WITHOUT_CUDA:
        if cuda:
            raise RuntimeError(f"init_process_group({asked!r}) on a host with CUDA: the testbed sums CPU tensors through the "
                               "emulated switch, and NCCL's GPU tensors would never cross it; run the script on the CPU "
                               "with backend 'gloo' (docs/pytorch.md)")
        log.info("the script asks for %r on a host without CUDA: it gets the run's method's backend, as it would get Gloo", asked)
        return method_backend
    return asked  # mpi, ucc, a backend of the script's own: as torch builds it


def testbed_init(original: Callable[..., Any], method_backend: str, meet: Rendezvous) -> Callable[..., Any]:
    """``init_process_group`` as the script's calls of it are served here (the module docstring)."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        call = signature.bind(*args, **kwargs)
        given = call.arguments
        rank, world_size = given.get("rank", -1), given.get("world_size", -1)
        if rank not in (-1, meet.rank) or world_size not in (-1, meet.world_size):
            raise RuntimeError(f"init_process_group(rank={rank}, world_size={world_size}) on the testbed's rank {meet.rank} of "
                               f"{meet.world_size}: each emulated host is one rank, the one RANK and WORLD_SIZE in the "
                               "environment name; pass those, or neither (docs/pytorch.md)")
        if given.get("store") is not None:
            raise RuntimeError("init_process_group(store=...): the testbed's ranks meet through its own rendezvous (env://); "
                               "pass no store (docs/pytorch.md)")
        own = [f"init_method={given['init_method']!r}"] if given.get("init_method") not in (None, "env://") else []
        own += [f"{name}={os.environ.get(name)}" for name, value in (("MASTER_ADDR", meet.master_addr), ("MASTER_PORT", meet.master_port))
                if os.environ.get(name) != value]
        if own:
            log.info("the script's rendezvous (%s) would meet only this host's ranks: the testbed's (%s:%s) replaces it",
                     ", ".join(own), meet.master_addr, meet.master_port)
            given.pop("init_method", None)
            os.environ.update(MASTER_ADDR=meet.master_addr, MASTER_PORT=meet.master_port)
        asked = given.get("backend")
        given["backend"] = backend_for(asked, method_backend, torch.cuda.is_available())
        log.info("the script's init_process_group(%r) builds a %s process group", asked, given["backend"])
        return original(*call.args, **call.kwargs)

    return init_process_group


def testbed_spawn(meet: Rendezvous) -> Callable[..., Any]:
    """``torch.multiprocessing.spawn`` and ``start_processes`` as served here: this host's
    rank of the processes the script would start, in this process."""

    def spawn(fn: Callable[..., Any], args: tuple[Any, ...] = (), nprocs: int = 1, join: bool = True, *_: Any, **__: Any) -> None:
        if nprocs != meet.world_size:
            raise RuntimeError(f"torch.multiprocessing.spawn(nprocs={nprocs}) on the testbed's {meet.world_size} ranks: each "
                               "emulated host runs one rank, the one spawn starts for it, so spawn one process per rank "
                               f"(nprocs = WORLD_SIZE = {meet.world_size}) or call the function once (docs/pytorch.md)")
        if not join:
            raise RuntimeError("torch.multiprocessing.spawn(join=False): the testbed runs this host's rank in the script's "
                               "process and has no process context to return; spawn with join=True (docs/pytorch.md)")
        log.info("the script spawns %d processes: this host runs rank %d's, %s(%d, ...), in its own process",
                 nprocs, meet.rank, getattr(fn, "__name__", fn), meet.rank)
        fn(meet.rank, *args)

    return spawn


@contextlib.contextmanager
def script_shapes(method_backend: str, meet: Rendezvous) -> Iterator[None]:
    """While the script runs: its ``init_process_group`` and ``mp.spawn`` served as the module says."""
    patched = [(dist, "init_process_group"), (distributed_c10d, "init_process_group"),
               (torch.multiprocessing, "spawn"), (torch.multiprocessing, "start_processes")]
    saved = [getattr(module, name) for module, name in patched]
    init, spawn = testbed_init(distributed_c10d.init_process_group, method_backend, meet), testbed_spawn(meet)
    for (module, name), replacement in zip(patched, (init, init, spawn, spawn)):
        setattr(module, name, replacement)
    try:
        yield
    finally:
        for (module, name), original in zip(patched, saved):
            setattr(module, name, original)
