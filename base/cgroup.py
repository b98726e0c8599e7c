"""Cgroups of its own for a group of processes: one cap on the memory of all of them
together, one on the CPU time they get together.

RLIMIT_AS caps each process on its own, so n processes of a submission get n times the
cap between them (a submission that forks); and no rlimit caps how many cores they keep
busy. A cgroup caps their sum, whatever they do: every process started inside it stays in
it (its children too), and what they use is charged to it. Past the memory limit (their
pages, the files they write to a tmpfs), the kernel's OOM killer ends the largest of them,
and no process outside it; past the CPU quota (CFS bandwidth: ``cpus`` cores' worth of
each period), all of them wait for the next period.

``capped_group`` makes them as children of this process's own cgroups (so that the limits
this process is under hold for them too): in cgroup v2 one cgroup for every controller the
v2 hierarchy has (v2 also tries the hierarchy's root when this process's cgroup cannot
have children with the controllers: v2's rule, a cgroup with processes cannot give its
children controllers), else one in each controller's cgroup v1 hierarchy (where the
memory one also caps swap, ``memory.memsw``, if the kernel accounts it). A cap no cgroup
can carry (no controller, not root, a container without a writable cgroup file system) is
in the group's ``missing``, with why: the caller says so and keeps its per-process caps.
The cgroups are removed when the context ends, also on an exception or Ctrl-C (a second
one waits for it): their processes (the caller has stopped them: they are only waited
for, and any left after ``DRAIN_S`` is killed) leave them first.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from base.lifetime import deferred_signals

DRAIN_S = 10.0
"""How long the cgroup's last processes may take to exit before they are killed."""
CPU_PERIOD_US = 100_000
"""The CFS bandwidth period: the quota is ``cpus`` times this, in every period."""
CONTROLLERS = ("memory", "cpu")
_names = itertools.count()


class CgroupError(OSError):
    """No cgroup with the controller can be made here: the message says why."""


@dataclass(frozen=True)
class Cgroup:
    path: Path
    version: int
    """1 or 2: which hierarchy (the files differ)."""
    controllers: tuple[str, ...]
    """What it caps: 'memory', 'cpu' (v2: both in one cgroup; v1: one per hierarchy)."""

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

    def stat(self, name: str) -> dict[str, int]:
        """A flat-keyed file of the cgroup ('memory.events', 'cpu.stat'); empty if unreadable."""
        try:
            return {key: int(value) for key, value in (line.split() for line in (self.path / name).read_text().splitlines())}
        except (OSError, ValueError):
            return {}


@dataclass(frozen=True)
class CappedGroup:
    """The cgroups of one group of processes, and the caps none could carry."""

    cgroups: tuple[Cgroup, ...]
    missing: dict[str, str] = field(default_factory=dict)
    """Controller ('memory', 'cpu') -> why no cgroup caps it here."""

    def join(self) -> None:
        for cgroup in self.cgroups:
            cgroup.join()

    def _with(self, controller: str) -> Cgroup | None:
        return next((cgroup for cgroup in self.cgroups if controller in cgroup.controllers), None)

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for reaching the memory limit."""
        cgroup = self._with("memory")
        if cgroup is None:
            return 0
        return cgroup.stat("memory.events" if cgroup.version == 2 else "memory.oom_control").get("oom_kill", 0)

    def cpu_throttled_s(self) -> float:
        """How long its processes waited, all together, for their next CPU quota."""
        cgroup = self._with("cpu")
        if cgroup is None:
            return 0.0
        stat = cgroup.stat("cpu.stat")
        return stat.get("throttled_usec", 0) / 1e6 if cgroup.version == 2 else stat.get("throttled_time", 0) / 1e9


@contextlib.contextmanager
def capped_group(prefix: str, *, memory_bytes: int | None = None, cpus: float | None = None) -> Iterator[CappedGroup]:
    """New cgroups, named ``prefix``-pid-n, capping their processes together at
    ``memory_bytes`` and ``cpus`` (cores' worth of CPU time; None: no such cap), removed on
    leaving; a cap no cgroup can carry is in the group's ``missing``."""
    wanted = {"memory": memory_bytes, "cpu": cpus}
    wanted = {controller: limit for controller, limit in wanted.items() if limit is not None}
    with contextlib.ExitStack() as stack:
        with deferred_signals():  # a Ctrl-C between making one and the callback below would leave it
            cgroups, missing = [], {}
            for parent, version, controllers, why_not in _parents(tuple(wanted)):
                missing |= why_not
                if controllers:
                    try:
                        cgroup = _make(parent, version, controllers, prefix, wanted)
                    except CgroupError as error:
                        missing |= dict.fromkeys(controllers, str(error))
                        continue
                    stack.callback(_remove_deferring_signals, cgroup)
                    cgroups.append(cgroup)
        yield CappedGroup(tuple(cgroups), missing)


def find_parent(controller: str = "memory") -> tuple[Path, int]:
    """Where a cgroup with ``controller`` can be made: (the folder to make it in, its
    version); raises CgroupError naming what is missing."""
    for parent, version, controllers, why_not in _parents((controller,)):
        if controllers:
            return parent, version
        reason = why_not.get(controller)
    raise CgroupError(reason)


def _parents(controllers: tuple[str, ...]) -> Iterator[tuple[Path, int, tuple[str, ...], dict[str, str]]]:
    """Where to make the cgroups for ``controllers``: (folder, version, the controllers it
    gives, why not for those it cannot give), v2 first, then a v1 hierarchy per controller
    left; the last one names every controller still without a place."""
    mounts, own = _mounts(), _own_cgroups()
    left, reasons = list(controllers), {controller: [] for controller in controllers}
    if "cgroup2" in mounts and left:
        root = mounts["cgroup2"]
        for parent in dict.fromkeys([root / own.get("", "/").lstrip("/"), root]):
            given = []
            for controller in list(left):
                try:
                    _enable(parent, controller)
                    given.append(controller)
                    left.remove(controller)
                except OSError as error:
                    reasons[controller].append(f"cgroup v2 {parent}: {error.strerror or error}")
            if given:
                yield parent, 2, tuple(given), {}
                break
    for controller in list(left):
        if controller in mounts:
            parent = mounts[controller] / own.get(controller, "/").lstrip("/")
            if os.access(parent, os.W_OK):
                left.remove(controller)
                yield parent, 1, (controller,), {}
                continue
            reasons[controller].append(f"cgroup v1 {parent}: not writable")
    missing = {controller: "; ".join(reasons[controller]) or f"no cgroup file system with the {controller} controller is mounted"
               for controller in left}  # fmt: skip
    if missing:
        yield Path(), 0, (), missing


def _mounts() -> dict[str, Path]:
    """The cgroup v2 mount ('cgroup2') and each v1 hierarchy of CONTROLLERS, from mountinfo."""
    found: dict[str, Path] = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        after = fields[fields.index("-") + 1 :]
        fstype, options = after[0], after[2].split(",") if len(after) > 2 else []
        if fstype == "cgroup2":
            found.setdefault("cgroup2", Path(fields[4]))
        elif fstype == "cgroup":
            for controller in CONTROLLERS:
                if controller in options:
                    found.setdefault(controller, Path(fields[4]))
    return found


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup per v1 controller ('memory', 'cpu') and in v2 (''), from /proc/self/cgroup."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(",") if controllers else [""]:
            own[controller] = path
    return own


def _enable(parent: Path, controller: str) -> None:
    """Give ``parent``'s children v2's ``controller``, or raise OSError."""
    if controller not in (parent / "cgroup.controllers").read_text().split():
        raise OSError(f"no {controller} controller (it has: {(parent / 'cgroup.controllers').read_text().strip() or 'none'})")
    if controller not in (parent / "cgroup.subtree_control").read_text().split():
        (parent / "cgroup.subtree_control").write_text(f"+{controller}")


def _limits(version: int, controller: str, limit: float) -> dict[str, str]:
    """The files (and values) that cap ``controller`` at ``limit``; optional ones last."""
    if controller == "cpu":
        quota = max(1000, round(limit * CPU_PERIOD_US))  # the kernel's smallest quota is 1 ms
        return {"cpu.max": f"{quota} {CPU_PERIOD_US}"} if version == 2 else {
            "cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": str(quota)}  # fmt: skip
    if version == 2:
        return {"memory.max": str(int(limit)), "memory.swap.max": "0"}
    return {"memory.limit_in_bytes": str(int(limit)),  # then memory and swap together: no escape into swap
            "memory.memsw.limit_in_bytes": str(int(limit))}  # fmt: skip


OPTIONAL = ("memory.swap.max", "memory.memsw.limit_in_bytes")
"""Limit files a kernel without swap accounting does not have."""


def _make(parent: Path, version: int, controllers: tuple[str, ...], prefix: str, wanted: dict[str, float]) -> Cgroup:
    path = parent / f"{prefix}-{os.getpid()}-{next(_names)}"
    try:
        path.mkdir()
    except OSError as error:
        raise CgroupError(f"cannot make {path}: {error.strerror}") from None
    cgroup = Cgroup(path, version, controllers)
    try:
        for controller in controllers:
            for name, value in _limits(version, controller, wanted[controller]).items():
                if name not in OPTIONAL or (path / name).exists():
                    (path / name).write_text(value)
    except OSError as error:
        _remove(cgroup)
        raise CgroupError(f"cannot set the limits of {path}: {error.strerror}") from None
    return cgroup


def _remove_deferring_signals(cgroup: Cgroup) -> None:
    with deferred_signals():  # nor may a second Ctrl-C cut its removal short
        _remove(cgroup)


def _remove(cgroup: Cgroup) -> None:
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
