"""A worker's host loop whose process is slow to exit when told (tests/test_reliability.py):
after 'exit' it leaves a thread that the interpreter's exit waits for, for EXIT_HELD_S
seconds (forever without it), as a library's teardown can (PyTorch's takes seconds)."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from hosts.events import emit_ready
from protocol.worker_spec import WorkerSpec


def hold_the_exit(seconds: float | None) -> None:
    threading.Event().wait(seconds)


def serve(spec: WorkerSpec, rank: int, spec_path: Path) -> None:
    emit_ready()
    held_s = os.environ.get("EXIT_HELD_S")
    for line in sys.stdin:
        if line.split() == ["exit"]:
            threading.Thread(target=hold_the_exit, args=(None if held_s is None else float(held_s),), name="held").start()
            return
