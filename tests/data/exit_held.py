"""A worker's host loop whose process does not exit when told (tests/test_reliability.py):
after 'exit' it leaves a thread that the interpreter's exit waits for, forever, as a
library's teardown can."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from hosts.events import emit_ready
from protocol.worker_spec import WorkerSpec


def hold_the_exit(forever: threading.Event) -> None:
    forever.wait()


def serve(spec: WorkerSpec, rank: int, spec_path: Path) -> None:
    emit_ready()
    for line in sys.stdin:
        if line.split() == ["exit"]:
            threading.Thread(target=hold_the_exit, args=(threading.Event(),), name="held").start()
            return
