"""The process the testbed starts on every emulated host: one rank of one method.

    python -m hosts.worker SPEC.json --rank R

The runner (experiments/workers.py) writes SPEC.json (protocol/worker_spec.py: method,
peers, switch address, protocol parameters, input file per rank) and talks to this process over stdin/stdout:

    worker -> {"event": "ready", "pid": P}       after set-up (sockets, connections)
    runner -> "go <repetition>"                  all ranks released together (a barrier)
    worker -> {"event": "done", "repetition": r, "stats": {...}, "result": "path.npy"}
    runner -> "exit"
    worker -> {"event": "error", "message": "...", "timed_out": bool} then exit status 1, on any
              failure; ``timed_out`` when an all-reduce missed its deadline (spec's job_timeout_s);
              with "errno" and "filename" when the failure was an OSError (a full disk, say)

Results are written as .npy next to the spec so the runner verifies them exactly.
"""

from __future__ import annotations

import argparse
import dataclasses
import faulthandler
import logging
import sys
from pathlib import Path
from typing import Any, Callable

import numpy as np

from base.plugin import resolve
from hosts.allreduce import build
from hosts.events import emit, emit_error, emit_ready
from protocol.worker_spec import STACKS_SIGNAL, WorkerSpec

log = logging.getLogger("hosts.worker")


def serve(spec: WorkerSpec, rank: int, spec_path: Path) -> None:
    """All-reduce this rank's tensor once per released repetition (the workloads that hand
    the workers their tensors); results next to the spec."""
    tensor = np.load(spec.inputs[rank])
    answer_jobs(spec, rank, spec_path, lambda repetition: tensor)


def answer_jobs(spec: WorkerSpec, rank: int, spec_path: Path, tensor_of: Callable[[int], np.ndarray]) -> None:
    """All-reduce ``tensor_of(r)`` when released with repetition r, until told to exit; results next to the spec."""
    out_dir = spec_path.parent
    method = build(spec, rank)
    try:
        emit_ready()
        for line in sys.stdin:
            command = line.split()
            if command == ["exit"]:
                return
            if len(command) != 2 or command[0] != "go":
                raise ValueError(f"unexpected command from the runner: {line.strip()!r}")
            repetition = int(command[1])
            values, int_sum, stats = method.allreduce(tensor_of(repetition))
            result_path = out_dir / f"{spec.method}-rank{rank}-rep{repetition}.npy"
            np.save(result_path, values)
            event: dict[str, Any] = {"event": "done", "repetition": repetition, "stats": dataclasses.asdict(stats), "result": str(result_path)}
            if int_sum is not None:
                int_path = out_dir / f"{spec.method}-rank{rank}-rep{repetition}-int.npy"
                np.save(int_path, int_sum)
                event["int_sum"] = str(int_path)
            emit(event)
        raise EOFError("the runner closed stdin before saying exit")
    finally:
        method.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("--rank", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s rank{args.rank} %(name)s %(levelname)s %(message)s")
    # A rank that does not exit when told (a thread that holds the interpreter's exit, a hang
    # in a library's teardown) is asked where its threads are: the runner sends STACKS_SIGNAL
    # and shows the dump, which lands in this rank's log (experiments/workers.py, finish).
    faulthandler.register(STACKS_SIGNAL, file=sys.stderr, all_threads=True)
    try:
        spec = WorkerSpec.read(args.spec)
        resolve(spec.serve)(spec, args.rank, args.spec)  # the workload's host loop (workloads/kinds/)
    except Exception as exc:
        log.exception("worker failed")
        emit_error(exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
