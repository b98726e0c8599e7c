"""``python -m hosts.server MODULE:ATTRIBUTE SPEC.json --index I``: one server host's process
(network/servers.py starts it on a host a protocol runs beside its workers).

``MODULE:ATTRIBUTE`` is the protocol's server (``Aggregation.server``), called as
``serve(spec, index)`` with its job's workers' spec (their method, job parameters and
addresses, the job's servers' addresses) and its index among that job's servers. It runs
until its job is done or it is told to stop (SIGTERM).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from base.plugin import resolve
from protocol.worker_spec import WorkerSpec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hosts.server", description=__doc__.splitlines()[0])
    parser.add_argument("reference", help="module:attribute of the protocol's server")
    parser.add_argument("spec", type=Path, help="its job's workers' spec (JSON)")
    parser.add_argument("--index", type=int, default=0, help="which of the job's servers it is")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        serve = resolve(args.reference)
        spec = WorkerSpec.read(args.spec)
    except (ValueError, ImportError, AttributeError, OSError) as exc:
        print(f"hosts.server: {exc}", file=sys.stderr)
        return 2
    serve(spec, args.index)
    return 0


if __name__ == "__main__":
    sys.exit(main())
