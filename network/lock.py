"""One emulated network at a time on a machine, and a record of what the holder made.

Mininet names interfaces after nodes (h1-eth0, s1-eth1) in the root namespace, so two runs
at once would collide on the same names, and the second would fail half-built. Runs
therefore take an exclusive lock for the lifetime of their network; a second run waits,
saying for whom (a stop signal meanwhile is ``WaitInterrupted``: nothing was built).

The lock file also holds a record of its holder: its pid, the interfaces it created and
the folders it wants gone when it is gone. A holder that stops normally empties the file
when it releases the lock. The kernel releases the lock of a holder that was killed, but
the record stays: the next holder finds it (``previous``) and knows exactly what to remove
(network.cleanup). While the lock is held, the holder's environment carries ``HOLDER_ENV``,
so every process it starts -- Mininet's shells, switches, workers -- can be found by that
pid if it outlives its owner.

A run holds the lock from its first point to its last (``held``): each point's network
takes it again, from the same process, which only nests (a second flock of the same file
from this process would wait for itself). So on a shared machine other runs wait between
runs, not between the points of one, and a sweep's points follow one another.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Iterator, Sequence

log = logging.getLogger(__name__)

LOCK_PATH = Path("/run/lock/switchml-testbed.lock") if Path("/run/lock").is_dir() else Path("/tmp/switchml-testbed.lock")
HOLDER_ENV = "SWITCHML_NETWORK_HOLDER"


@dataclass
class HolderRecord:
    """What a lock holder left in the lock file: enough to clean up after it."""

    pid: int
    interfaces: list[str] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    commands: list[list[str]] = field(default_factory=list)
    """Commands that remove what it left elsewhere (on a cluster's other servers)."""

    @classmethod
    def parse(cls, text: str) -> HolderRecord:
        """The record in a lock file; a record that is not one (an older format, a torn
        write) still names nothing to remove rather than failing the run."""
        try:
            data = json.loads(text)
            return cls(pid=int(data["pid"]), interfaces=list(data["interfaces"]), directories=list(data["directories"]),
                       commands=[list(c) for c in data.get("commands", [])])
        except (ValueError, KeyError, TypeError):
            log.warning("lock file holds %r, not a holder record; nothing recorded to clean", text[:80])
            return cls(pid=-1)


class WaitInterrupted(KeyboardInterrupt):
    """Ctrl-C (or another stop signal) while waiting for another run's network: this run
    built nothing, and its message must not say that a network was torn down."""


_HELD: dict[Path, NetworkLock] = {}
"""The lock this process holds, per lock file: the one a nested acquire shares."""


class NetworkLock:
    def __init__(self, path: Path = LOCK_PATH) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self._record: HolderRecord | None = None
        self._outer: NetworkLock | None = None
        """The holder this acquire nests in (this process held the lock already), else None."""
        self.previous: HolderRecord | None = None
        """The record of a holder that died holding the lock (found by acquire), else None."""

    def acquire(self, wait: bool = True) -> bool:
        """Take the lock (waiting for another holder if ``wait``); False if not taken. If this
        process holds it already, nest in that hold: the first nested acquire gets what a dead
        holder left (``previous``), and what it declares goes into the holder's record."""
        outer = _HELD.get(self.path)
        if outer is not None:
            self._outer = outer
            self.previous, outer.previous = outer.previous, None
            return True
        handle = self.path.open("a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                handle.close()
                return False
            holder = self.holder()
            log.warning("another emulated network is running (%s, lock %s); waiting for it to finish", holder, self.path)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX)
            except KeyboardInterrupt as interrupt:
                handle.close()
                raise WaitInterrupted(f"interrupted while waiting for the network, which another run holds ({holder}); "
                                      "nothing was built") from interrupt
        handle.seek(0)
        left = handle.read().strip()
        self.previous = HolderRecord.parse(left) if left else None
        self._file = handle
        self._record = HolderRecord(pid=os.getpid())
        self._write()
        os.environ[HOLDER_ENV] = str(os.getpid())
        _HELD[self.path] = self
        return True

    def holder(self) -> str:
        """Who holds the lock, as far as its record says (for messages)."""
        try:
            text = self.path.read_text().strip()
        except OSError:
            return "holder unknown"
        return f"pid {HolderRecord.parse(text).pid}" if text else "holder unknown"

    def declare(self, interfaces: Sequence[str] = (), directories: Sequence[str] = ()) -> None:
        """Add to the record what must be removed if this process dies holding the lock."""
        if self._outer is not None:
            return self._outer.declare(interfaces, directories)
        assert self._record is not None, "declare() needs the lock"
        self._record.interfaces += [i for i in interfaces if i not in self._record.interfaces]
        self._record.directories += [d for d in directories if d not in self._record.directories]
        self._write()

    def declare_commands(self, commands: Sequence[Sequence[str]]) -> None:
        """Set the commands the next holder runs if this process dies holding the lock."""
        if self._outer is not None:
            return self._outer.declare_commands(commands)
        assert self._record is not None, "declare_commands() needs the lock"
        self._record.commands = [list(c) for c in commands]
        self._write()

    def _write(self) -> None:
        assert self._file is not None and self._record is not None
        self._file.seek(0)
        self._file.truncate()
        self._file.write(json.dumps(asdict(self._record)))
        self._file.flush()

    def release(self) -> None:
        """Give the lock up; a nested hold gives up only what it declared (its network is gone)."""
        if self._outer is not None:
            outer, self._outer = self._outer, None
            if outer._record is not None:
                outer._record = HolderRecord(pid=outer._record.pid)
                outer._write()
            return
        if self._file is not None:
            _HELD.pop(self.path, None)
            os.environ.pop(HOLDER_ENV, None)
            self._file.seek(0)
            self._file.truncate()
            self._file.flush()
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None
            self._record = None


@contextlib.contextmanager
def held(path: Path = LOCK_PATH) -> Iterator[NetworkLock]:
    """The lock for a whole run (every point's network nests in it), released on the way out."""
    lock = NetworkLock(path)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()
