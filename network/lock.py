"""One emulated network at a time on a machine.

Mininet names interfaces after nodes (h1-eth0, s1-eth1) in the root namespace, so two runs
at once would collide on the same names, and the second would fail half-built. Runs
therefore take an exclusive lock for the lifetime of their network; a second run waits,
saying for whom.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)

LOCK_PATH = Path("/run/lock/switchml-testbed.lock") if Path("/run/lock").is_dir() else Path("/tmp/switchml-testbed.lock")


class NetworkLock:
    def __init__(self, path: Path = LOCK_PATH) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            log.warning("another emulated network is running (pid %s, lock %s); waiting for it to finish", holder, self.path)
            fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle

    def release(self) -> None:
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
