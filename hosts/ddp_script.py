"""A user's own DDP script as one rank of a testbed run (workload kind ``ddp_script``).

The host loop hosts/worker.py runs for a spec whose ``script`` names the user's script and
its arguments; the conversation with the runner is that of every workload (ready, ``go 1``,
done, ``exit``). Before the script runs, the environment says where it is, as torchrun
would say it (RANK, WORLD_SIZE, LOCAL_RANK 0 and LOCAL_WORLD_SIZE 1, GROUP_RANK, ROLE_RANK,
...: each host is one node of one rank), with MASTER_ADDR and MASTER_PORT (rank 0's
address and the spec's port) for ``env://``, GLOO_SOCKET_IFNAME (this host's emulated
interface, so Gloo's traffic crosses the emulated links) and SWITCHML_WORKER_SPEC (the spec, which ``hosts.torch_hook.testbed_hook`` reads).
So the script needs only these lines to train through the switch:

    dist.init_process_group("gloo")
    model = DistributedDataParallel(MyModel())
    model.register_comm_hook(*testbed_hook())

Then the script runs here, in this process (``runpy``, with ``sys.argv`` its own), so the
hook's state is at hand when it returns. The report: the all-reduce statistics of the whole
script (SwitchML: the library's, added over every bucket; Gloo: this host's TCP counters
and this process's payload bytes), the elements all-reduced, the script's wall time, and the
last backward pass's buckets (every rank's inputs, rank 0's sums), from which the runner
verifies that pass's all-reduces as the torch kind verifies every step
(experiments/kinds/torch_training.py's ``verify_buckets``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import runpy
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from hosts.events import emit, emit_ready
from hosts.gloo_allreduce import interface_with_address
from hosts.tcp_counters import ProcessTcpMeter
from hosts.torch_hook import ACTIVE, SPEC_ENVIRONMENT, SwitchMLHookState
from hosts.training import ARRAYS_RANK, steps
from protocol.worker_spec import WorkerSpec
from workloads.training import array_digest

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


def serve_script(spec: WorkerSpec, rank: int, spec_path: Path) -> None:
    """Run the spec's script once when released, then report its all-reduces (the ddp_script
    workload's host loop, workloads/kinds/ddp_script.py)."""
    script, *arguments = spec.script
    os.environ.update(script_environment(spec, rank, spec_path))
    emit_ready()
    released = steps(sys.stdin)
    next(released)
    tcp = ProcessTcpMeter()
    started = time.perf_counter()
    sys.argv = [str(script), *arguments]
    with output_to_log():
        runpy.run_path(str(script), run_name="__main__")
    script_s = time.perf_counter() - started
    if not ACTIVE:
        raise RuntimeError(f"{script} never called hosts.torch_hook.testbed_hook(): nothing went through the testbed's all-reduce")
    state = ACTIVE[-1]
    buckets = state.take()
    stats = state.stats if isinstance(state, SwitchMLHookState) else tcp.stats(state.seconds)
    stats.tat_s = state.seconds
    out_dir = spec_path.parent
    event: dict[str, Any] = {"event": "done", "repetition": 1, "stats": dataclasses.asdict(stats), "elements": state.elements,
                             "script_s": script_s, "compute_s": max(0.0, script_s - state.seconds), "digests": {},
                             "buckets": str(out_dir / f"{spec.method}-rank{rank}-inputs.npz")}
    np.savez(event["buckets"], *[b.inputs for b in buckets])
    if isinstance(state, SwitchMLHookState):
        event["digests"]["int_sum"] = array_digest(np.concatenate([b.int_sum for b in buckets]))
        sums = {f"int_sum{i}": b.int_sum for i, b in enumerate(buckets)} | {f"values{i}": b.values for i, b in enumerate(buckets)}
        state.client.close()
    else:
        sums = {f"average{i}": b.values for i, b in enumerate(buckets)}
    if rank == ARRAYS_RANK:
        event["sums"] = str(out_dir / f"{spec.method}-sums.npz")
        np.savez(event["sums"], **sums)
    emit(event)
    for _ in released:  # the runner says exit
        raise ValueError("a script runs once: the runner released it twice")
