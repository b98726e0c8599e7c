"""A user's own DDP script as one rank of a testbed run (workload kind ``ddp_script``).

The host loop hosts/worker.py runs for a spec whose ``script`` names the user's script and
its arguments; the conversation with the runner is that of every workload (ready, ``go 1``,
done, ``exit``). Before the script runs, the environment says where it is, as torchrun
would say it (RANK, WORLD_SIZE, LOCAL_RANK 0 and LOCAL_WORLD_SIZE 1, GROUP_RANK, ROLE_RANK,
...: each host is one node of one rank), with MASTER_ADDR and MASTER_PORT (rank 0's
address and the spec's port) for ``env://``, GLOO_SOCKET_IFNAME (this host's emulated
interface, so Gloo's traffic crosses the emulated links) and SWITCHML_WORKER_SPEC (the
spec, which ``hosts.torch_hook.testbed_hook`` reads).

The method decides where the script's collectives go, with no line of the script changed:
the testbed's backends are registered with torch (hosts/torch_backend.py), and while the
script runs, its ``init_process_group`` asking for Gloo (or for no backend, for an
in-network backend, or for NCCL on a host without CUDA) builds the method's backend instead
(its record's ``torch_backend``; hosts/ddp_shapes.py also brings a script's own MASTER_ADDR
and the tutorial's ``mp.spawn`` to the testbed's rendezvous): for an in-network method
(``switchml``, ``atp``), a process group whose float32/int32 SUM all-reduces (DDP's gradient buckets
among them) go through the switch and everything else through Gloo; for ``gloo``, Gloo
itself, its float32 and int32 sums recorded. A script may still register ``testbed_hook()`` as its
DDP hook; the buckets then take the hook's path to the same switch queue.

Then the script runs here, in this process (``runpy``, with ``sys.argv`` its own), so its
process group is at hand when it returns. The report: the all-reduce statistics of the
whole script (in-network: its client's, added over every all-reduce through the switch;
Gloo: this host's TCP counters and this process's payload bytes), the elements all-reduced,
the calls that fell back to Gloo, the script's wall time, and its last all-reduces (every
rank's inputs, rank 0's sums; hosts/torch_backend.py's ``RECORDED_BYTES``), from which the
runner verifies them as the torch kind verifies every step
(experiments/kinds/torch_training.py's ``verify_buckets``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import runpy
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch.distributed as dist

from hosts.ddp_shapes import Rendezvous, script_shapes
from hosts.events import emit, emit_ready
from hosts.gloo_allreduce import interface_with_address
from hosts.tcp_counters import ProcessTcpMeter
from hosts.torch_backend import GROUPS, SwitchClient, SwitchProcessGroup, close_groups, fallback_counts, register, switch_client
from hosts.torch_hook import SPEC_ENVIRONMENT
from hosts.training import ARRAYS_RANK, steps
import methods
from protocol.worker_spec import WorkerSpec
from workloads.training import array_digest

log = logging.getLogger(__name__)

def script_environment(spec: WorkerSpec, rank: int, spec_path: Path) -> dict[str, str]:
    """What torchrun gives a rank (each emulated host is one node of one rank: LOCAL_RANK 0
    of LOCAL_WORLD_SIZE 1, so no two ranks share memory), what torch.distributed's env://
    rendezvous reads, and what ``testbed_hook`` reads, for ``rank``."""
    world = str(spec.n_workers)
    return {"RANK": str(rank), "WORLD_SIZE": world, "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "GROUP_RANK": str(rank), "GROUP_WORLD_SIZE": world, "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": world,
            "ROLE_NAME": "default", "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
            "TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": spec.peers[0][0], "MASTER_PORT": str(spec.peers[0][1]),
            "GLOO_SOCKET_IFNAME": interface_with_address(spec.peers[rank][0]), SPEC_ENVIRONMENT: str(spec_path)}


@contextlib.contextmanager
def output_to_log() -> Iterator[None]:
    """The script's standard output into this rank's log (stderr): stdout carries the
    conversation with the runner, which a print would break. At the descriptor, so that
    output written below Python (a C extension's) is moved too."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def run_script(script: str) -> None:
    """Run ``script`` as ``python script`` would (``sys.argv`` already its own).

    A script that ends with ``sys.exit(0)`` or ``sys.exit()`` (the ``sys.exit(main())``
    idiom) has finished: its SystemExit is a successful return here, not an exit of the
    rank before its report. Any other status fails the rank, naming it as a shell would see it."""
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exited:
        if exited.code is None or exited.code == 0:
            return
        if isinstance(exited.code, int):
            raise RuntimeError(f"{script} called sys.exit({exited.code}): exit status {exited.code}") from None
        raise RuntimeError(f"{script} called sys.exit({exited.code!r}): exit status 1") from None


def world_group(script: Path) -> SwitchProcessGroup:
    """The first process group the script built, which all-reduced through the method."""
    if not GROUPS:
        raise RuntimeError(f"{script} never called torch.distributed.init_process_group: it has no process group to report")
    group = GROUPS[0]
    if not group.records.calls:
        raise RuntimeError(f"{script} all-reduced no float32 or int32 sum: nothing went through the method's all-reduce")
    return group


def serve_script(spec: WorkerSpec, rank: int, spec_path: Path) -> None:
    """Run the spec's script once when released, then report its all-reduces (the ddp_script
    workload's host loop, workloads/kinds/ddp_script.py)."""
    script, *arguments = spec.script
    backend = methods.by_name(spec.method).torch_backend
    if backend is None:
        raise ValueError(f"method {spec.method} cannot run a DDP script (methods/{spec.method}.py: torch_backend)")

    def client(group_rank: int, size: int) -> SwitchClient:
        if size != spec.n_workers:
            raise ValueError(f"a {backend} process group of {size} ranks: the switch's job has {spec.n_workers}")
        return switch_client(spec, rank)

    register(client)
    environment = script_environment(spec, rank, spec_path)
    os.environ.update(environment)
    emit_ready()
    released = steps(sys.stdin)
    next(released)
    tcp = ProcessTcpMeter()
    started = time.perf_counter()
    sys.argv = [str(script), *arguments]
    try:
        meet = Rendezvous(rank, spec.n_workers, environment["MASTER_ADDR"], environment["MASTER_PORT"])
        with output_to_log(), script_shapes(backend, meet):
            run_script(script)
        script_s = time.perf_counter() - started
        group = world_group(Path(script))
        records, kept = group.records, group.records.kept()
        through_switch = group.switch is not None
        if through_switch:
            stats = dataclasses.replace(records.stats)
        else:
            stats = tcp.stats(records.seconds)
        fallbacks = fallback_counts(GROUPS)
    finally:
        if dist.is_initialized():  # a script that did not destroy its group: not left to the interpreter's exit
            dist.destroy_process_group()
        close_groups()
    out_dir = spec_path.parent
    event: dict[str, Any] = {"event": "done", "repetition": 1, "stats": dataclasses.asdict(stats), "elements": records.elements,
                             "all_reduces": records.calls, "fallbacks": dict(fallbacks), "flushed": records.flushed, "script_s": script_s,
                             "compute_s": max(0.0, script_s - stats.tat_s), "digests": {},
                             "buckets": str(out_dir / f"{spec.method}-rank{rank}-inputs.npz")}
    np.savez(event["buckets"], *[r.inputs for r in kept])
    if through_switch:
        event["digests"]["int_sum"] = array_digest(np.concatenate([r.int_sum for r in kept]))
        sums = {f"int_sum{i}": r.int_sum for i, r in enumerate(kept)} | {f"values{i}": r.values for i, r in enumerate(kept)}
    else:
        sums = {f"sum{i}": r.values for i, r in enumerate(kept)}
    if rank == ARRAYS_RANK:
        event["sums"] = str(out_dir / f"{spec.method}-sums.npz")
        np.savez(event["sums"], **sums)
    emit(event)
    for _ in released:  # the runner says exit
        raise ValueError("a script runs once: the runner released it twice")
