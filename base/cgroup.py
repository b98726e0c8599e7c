"""A memory cgroup of its own for a group of processes: one cap on all of them together.

RLIMIT_AS caps each process on its own, so n processes of a submission get n times the
cap between them (a submission that forks). A memory cgroup caps their sum, whatever they
do: every process started inside it stays in it (its children too), and what they use
(their pages, the files they write to a tmpfs) is charged to it; past its limit, the
kernel's OOM killer ends the largest of them, and no process outside it.

``memory_cgroup`` makes one, in cgroup v2 where the memory controller is there, else in
cgroup v1's memory hierarchy (where it also caps swap, ``memory.memsw``, if the kernel
accounts it), as a child of this process's own cgroup (so that the limits this process is
under hold for it too); v2 also tries the hierarchy's root when this process's cgroup
cannot have children with the controller (v2's rule: a cgroup with processes cannot give
its children controllers). It raises CgroupError where neither can be made (no controller,
not root, a container without a writable cgroup file system): the caller says so and
keeps its per-process caps. The cgroup is removed when the context ends, also on an exception
or Ctrl-C (a second one waits for it): its processes (the caller has stopped them: they are only waited for, and any
left after ``DRAIN_S`` is killed) leave it first.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from base.lifetime import deferred_signals

DRAIN_S = 10.0
"""How long the cgroup's last processes may take to exit before they are killed."""
_names = itertools.count()


class CgroupError(OSError):
    """No memory cgroup can be made here: the message says why."""


@dataclass(frozen=True)
class MemoryCgroup:
    path: Path
    version: int
    """1 or 2: which hierarchy (the files differ)."""

    def join(self) -> None:
        """Move the calling process into the cgroup (a ``preexec_fn``: the child, before it
        execs, so that it and all it starts are inside; "0" is the writer itself)."""
        fd = os.open(self.path / "cgroup.procs", os.O_WRONLY)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)

    def processes(self) -> list[int]:
        try:
            return [int(pid) for pid in (self.path / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for reaching the limit."""
        events = self.path / ("memory.events" if self.version == 2 else "memory.oom_control")
        try:
            fields = dict(line.split() for line in events.read_text().splitlines() if len(line.split()) == 2)
        except OSError:
            return 0
        return int(fields.get("oom_kill", 0))


@contextlib.contextmanager
def memory_cgroup(limit_bytes: int, prefix: str) -> Iterator[MemoryCgroup]:
    """A new cgroup, named ``prefix``-pid-n, capping its processes at ``limit_bytes``
    together, removed on leaving; CgroupError, saying why, where none can be made."""
    with deferred_signals():  # a Ctrl-C between making it and the try below would leave it
        cgroup = _make(limit_bytes, prefix)
    try:
        yield cgroup
    finally:
        with deferred_signals():  # nor may a second Ctrl-C cut its removal short
            _remove(cgroup)


def find_parent() -> tuple[Path, int]:
    """Where a memory cgroup can be made: (the folder to make it in, its version); raises
    CgroupError naming what is missing."""
    mounts = _mounts()
    own = _own_cgroups()
    reasons = []
    if "cgroup2" in mounts:
        root = mounts["cgroup2"]
        for parent in dict.fromkeys([root / own.get("", "/").lstrip("/"), root]):
            try:
                _enable_memory(parent)
                return parent, 2
            except OSError as error:
                reasons.append(f"cgroup v2 {parent}: {error.strerror or error}")
    if "memory" in mounts:
        parent = mounts["memory"] / own.get("memory", "/").lstrip("/")
        if os.access(parent, os.W_OK):
            return parent, 1
        reasons.append(f"cgroup v1 {parent}: not writable")
    raise CgroupError("; ".join(reasons) or "no cgroup file system with the memory controller is mounted")


def _mounts() -> dict[str, Path]:
    """The cgroup v2 mount ('cgroup2') and the v1 memory hierarchy's ('memory'), from mountinfo."""
    found: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        after = fields[fields.index("-") + 1 :]
        fstype, options = after[0], after[2].split(",") if len(after) > 2 else []
        if fstype == "cgroup2":
            found.setdefault("cgroup2", Path(fields[4]))
        elif fstype == "cgroup" and "memory" in options:
            found.setdefault("memory", Path(fields[4]))
    return found


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per v1 controller ('memory') and in v2 (''), from /proc/self/cgroup."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own


def _enable_memory(parent: Path) -> None:
    """Give ``parent``'s children v2's memory controller, or raise OSError."""
    if "memory" not in (parent / "cgroup.controllers").read_text().split():
        raise OSError(f"no memory controller (it has: {(parent / 'cgroup.controllers').read_text().strip() or 'none'})")
    if "memory" not in (parent / "cgroup.subtree_control").read_text().split():
        (parent / "cgroup.subtree_control").write_text("+memory")


def _make(limit_bytes: int, prefix: str) -> MemoryCgroup:
    parent, version = find_parent()
    path = parent / f"{prefix}-{os.getpid()}-{next(_names)}"
    try:
        path.mkdir()
    except OSError as error:
        raise CgroupError(f"cannot make {path}: {error.strerror}") from None
    cgroup = MemoryCgroup(path, version)
    try:
        if version == 2:
            (path / "memory.max").write_text(str(limit_bytes))
            if (path / "memory.swap.max").exists():
                (path / "memory.swap.max").write_text("0")
        else:
            (path / "memory.limit_in_bytes").write_text(str(limit_bytes))
            if (path / "memory.memsw.limit_in_bytes").exists():  # memory and swap together: no escape into swap
                (path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))
    except OSError as error:
        _remove(cgroup)
        raise CgroupError(f"cannot set the limit of {path}: {error.strerror}") from None
    return cgroup


def _remove(cgroup: MemoryCgroup) -> None:
    """Wait for the cgroup's processes to exit (kill those left after DRAIN_S), then remove
    it; OSError if it still cannot be removed after as long again."""
    deadline = time.monotonic() + DRAIN_S
    while cgroup.processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in cgroup.processes():  # only processes of this cgroup, which exists for the caller's group alone
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + DRAIN_S
    while True:
        try:
            cgroup.path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # busy: the kernel is still tearing its last processes down
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


UNLIMITED_V1 = 1 << 62
"""cgroup v1 writes "no limit" as a page-rounded 2^63 - 1; anything above this is none."""


def memory_limit() -> tuple[int, str]:
    """The memory this process and its children may use together, and what sets it: the
    machine's physical memory, or less where the memory cgroup this process is in, or one
    above it, has a limit (a container's, a systemd slice's): memory.max in cgroup v2,
    memory.limit_in_bytes in v1. Past that limit the kernel's OOM killer ends a process of
    the run, without a word, however much memory the machine has."""
    best = (os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this machine's physical memory")
    mounts, own = _mounts(), _own_cgroups()
    hierarchies = []
    if "cgroup2" in mounts:
        hierarchies.append((mounts["cgroup2"], own.get("", "/"), "memory.max"))
    if "memory" in mounts:
        hierarchies.append((mounts["memory"], own.get("memory", "/"), "memory.limit_in_bytes"))
    for root, relative, name in hierarchies:
        folder = root / relative.lstrip("/")
        while folder.is_relative_to(root):
            try:
                text = (folder / name).read_text().strip()
            except OSError:  # the root cgroup has no limit file; a cgroup outside this namespace's view
                text = "max"
            if text != "max" and int(text) < min(best[0], UNLIMITED_V1):
                best = (int(text), f"the limit of memory cgroup {folder} ({name})")
            if folder == root:
                break
            folder = folder.parent
    return best
