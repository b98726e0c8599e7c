"""The worker's half of its conversation with the runner: one JSON object per stdout line
(the messages are listed in hosts/worker.py)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def emit_ready() -> None:
    """Set up and waiting for "go": with this process's pid as its own server sees it (the
    runner's child is an ssh client for a worker on another server: experiments/job_meter.py
    reads the worker's CPU there by this pid)."""
    emit({"event": "ready", "pid": os.getpid()})


def emit_error(exc: BaseException) -> None:
    """The last message of a failed worker: what failed, whether it was a missed deadline
    (``timed_out``), and for an OSError its errno and file (the runner tells a full disk by them)."""
    error: dict[str, Any] = {"event": "error", "message": f"{type(exc).__name__}: {exc}", "timed_out": isinstance(exc, TimeoutError)}
    if isinstance(exc, OSError) and exc.errno is not None:
        error |= {"errno": exc.errno, "filename": exc.filename}
    emit(error)
