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
import faulthandler
import logging
import sys
from pathlib import Path

from base.plugin import resolve
from hosts.allreduce import build
from hosts.events import emit_error
from hosts.rank import GivenTensor, commands, serve_program
from protocol.worker_spec import STACKS_SIGNAL, WorkerSpec

log = logging.getLogger("hosts.worker")


def serve(spec: WorkerSpec, rank: int, spec_path: Path) -> None:
    """All-reduce this rank's tensor once per released repetition (the workloads that hand
    the workers their tensors: hosts/rank.py's ``GivenTensor``); results next to the spec."""
    serve_program(GivenTensor(spec, rank), build(spec, rank), commands(),
                  lambda repetition: spec_path.parent / f"{spec.method}-rank{rank}-rep{repetition}.npy")


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
