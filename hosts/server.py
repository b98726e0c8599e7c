"""``python -m hosts.server MODULE:ATTRIBUTE SPEC.json --index I [--counts COUNTS.json]``: one
server host's process (network/servers.py starts it on a host a protocol runs beside its workers).

``MODULE:ATTRIBUTE`` is the protocol's server (``Aggregation.server``), built as
``server(spec, index)`` with its job's workers' spec (their method, job parameters and
addresses, the job's servers' addresses) and its index among that job's servers
(methods/aggregation.py, ``Server``). It runs until its job is done or it is told to stop
(SIGTERM, SIGINT).

Its counts reach the runner as a file, not a log line: with ``--counts`` the process writes
them there as JSON (name -> count) once it serves, again each time it receives SIGUSR1, and
when it stops, each time by an atomic rename, so a reader never sees half a file. The
runner reads them before and after each job (network/servers.py), as the simulated clock
asks its ``ServerCore`` (experiments/simulated.py): the same counts, per job, on both clocks.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import Mapping

from base.plugin import resolve
from methods.aggregation import Server
from protocol.worker_spec import WorkerSpec

log = logging.getLogger("hosts.server")


def write_counts(path: Path, counts: Mapping[str, int]) -> None:
    """``counts`` as JSON at ``path``, replacing what was there in one rename."""
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        json.dump(dict(counts), f)
    os.replace(temporary, path)


def run_server(server: Server, counts_path: Path | None = None) -> dict[str, int]:
    """``server`` run until SIGTERM or SIGINT (or its job's end), then closed; its counts
    written to ``counts_path`` once it serves, on each SIGUSR1 and at the end. Its final counts."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    if counts_path is not None:  # the handler first: the file's existence tells the runner a SIGUSR1 is safe to send
        signal.signal(signal.SIGUSR1, lambda *_: write_counts(counts_path, server.counts()))
        write_counts(counts_path, server.counts())
    try:
        server.run(stop)
    finally:
        server.close()
    final = dict(server.counts())
    if counts_path is not None:
        write_counts(counts_path, final)
    return final


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hosts.server", description=__doc__.splitlines()[0])
    parser.add_argument("reference", help="module:attribute of the protocol's server")
    parser.add_argument("spec", type=Path, help="its job's workers' spec (JSON)")
    parser.add_argument("--index", type=int, default=0, help="which of the job's servers it is")
    parser.add_argument("--counts", type=Path, help="where its counts are written (JSON), on SIGUSR1 and when it stops")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        build = resolve(args.reference)
        server = build(WorkerSpec.read(args.spec), args.index)
    except (ValueError, ImportError, AttributeError, OSError) as exc:
        print(f"hosts.server: {exc}", file=sys.stderr)
        return 2
    counts = run_server(server, args.counts)
    log.info("server %d stopped: %s", args.index, json.dumps(counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
