"""A worker's host loop that writes bytes that are not UTF-8 to its log, then fails
(tests/test_bad_input.py): the runner's report of the failure must still name the rank."""

from __future__ import annotations

import sys
from pathlib import Path

from protocol.worker_spec import WorkerSpec


def serve(spec: WorkerSpec, rank: int, spec_path: Path) -> None:
    sys.stderr.flush()
    sys.stderr.buffer.write(b"latin-1 from a library: d\xe9j\xe0 vu \xff\xfe\n")
    sys.stderr.buffer.flush()
    raise RuntimeError("the script's own error")
