"""Run one submission's graded tests where its code can harm nothing and read nothing.

An instructor's grade treats every submission as hostile (labs/README.md, "Grading a
class"). Its tests run:

- as an unprivileged user (SANDBOX_ID, no account's) that owns no file of the machine: it
  is root only inside a user namespace of its own, so the graded tests can still create
  network namespaces (labs 2 and 3), and it reads and writes the machine's files as nobody
  would;
- in a mount namespace whose root is a new, empty file system holding read-only views of
  the system's folders, of the grader's Python environment and of the graded tree (a clean
  tree: labs/grade.py's ``clean_tree``; its ``build/`` and ``results/`` private and empty),
  a private ``/tmp``, ``/run`` and ``/dev/shm``, a few devices, pseudo-terminals of its own,
  a folder for the report, and the tools of the track's switch target where they are
  installed outside the system's folders (a prebuilt bmv2 and p4c: ``toolchain_folders``,
  found where the grader's own PATH and PYTHONPATH find them). The reference, the
  instructor's tests folder and every other submission are not in it; mounts made before
  the user namespace are locked, so the submission cannot unmount them;
- in a PID namespace of its own (``/proc`` lists only its processes, so it cannot find the
  grader's command line, and every process of it dies with the namespace), and a network
  namespace with only a loopback (no network);
- under a wall-clock cap (the whole run is killed at ``wall_s``), a cap on the memory of
  all its processes together (a memory cgroup of its own, base/cgroup.py: a submission that
  forks gets no more between its processes than one would), the same cap on each process's
  address space (RLIMIT_AS: one process asking for more fails at once with a MemoryError,
  where the cgroup's OOM killer would end it; and the only cap where no cgroup can be made,
  which the grader logs once) and a cap on the number of its processes (RLIMIT_NPROC).

It needs root (namespaces, another user), util-linux's unshare, setpriv, prlimit and
pivot_root, and iproute2's ip: all in Debian's base system.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import pwd
import shlex
import signal
import stat
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from base.cgroup import CgroupError, MemoryCgroup, memory_cgroup
from base.lifetime import dies_with_this_process
from switches.target import Toolchain

log = logging.getLogger(__name__)

SANDBOX_ID = 64_399
"""The user and group id the submission runs as: in Debian's range for dynamic system users,
and checked to be no account's (``check_can_sandbox``)."""
TREE, OUT = Path("/grade/tree"), Path("/grade/out")
"""Where the graded tree (read-only) and the report's folder (writable) are inside."""
WRITABLE_IN_TREE = ("build", "results")
"""The tree's folders the tests write into (compiled programs, run folders): private, empty."""
SYSTEM_FOLDERS = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
"""Read-only in the sandbox: the interpreter, its libraries and the tools the tests start."""
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENVIRONMENT = {"PATH": SYSTEM_PATH, "HOME": "/tmp", "TMPDIR": "/tmp",
               "LANG": "C.UTF-8", "PYTHONPATH": str(TREE), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
               "MPLBACKEND": "Agg"}  # fmt: skip
"""The tests' whole environment: nothing of the grader's (which may hold what a student should
not read), but where the track's switch target's tools are (``environment``)."""


class SandboxError(RuntimeError):
    """This machine cannot run a sandbox (not root, a tool missing, the sandbox id taken)."""


@dataclass(frozen=True)
class Limits:
    wall_s: float
    """The whole run of one submission, start-up to the last test."""
    memory_bytes: int
    """All its processes together (a memory cgroup), and each one's address space."""
    processes: int
    """Processes and threads of the sandbox's user at once."""
    tmp_bytes: int = 512 << 20
    """Its /tmp (in memory)."""


@dataclass(frozen=True)
class Outcome:
    returncode: int
    output: str
    timed_out: bool
    oom_kills: int = 0
    """Processes the kernel killed for reaching the memory cap of all of them together."""


def check_can_sandbox() -> None:
    """Raise SandboxError unless this process can build the sandbox."""
    if os.geteuid() != 0:
        raise SandboxError("grading a submission runs it in a sandbox (namespaces, another user): run the grader as root")
    try:
        account = pwd.getpwuid(SANDBOX_ID)
    except KeyError:
        pass
    else:
        raise SandboxError(f"the sandbox's user id {SANDBOX_ID} is the account {account.pw_name!r}'s: it must be no one's")
    missing = [tool for tool in ("unshare", "setpriv", "prlimit", "pivot_root", "ip") if not _on_path(tool)]
    if missing:
        raise SandboxError(f"the sandbox needs util-linux and iproute2: {', '.join(missing)} not found")


def _on_path(tool: str) -> bool:
    path = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    return any(os.access(os.path.join(folder, tool), os.X_OK) for folder in path.split(":") if folder)


def _bind(source: Path, target: str, *, writable: bool = False) -> str:
    mode = "" if writable else " -o ro"
    return f"mkdir -p {target} && mount --rbind{mode} {shlex.quote(str(source))} {target}"


def toolchain_folders(toolchain: Toolchain) -> list[Path]:
    """What of ``toolchain`` the sandbox binds (read-only, at the same path): the install
    prefix of each of its executables' folders (a ``bin``'s parent: programs find their
    libraries and data beside it, ``../lib``, ``../share``), its Python folders and the
    folders its variables name; none the sandbox holds anyway (the system's folders, the
    grader's venv), none inside another."""
    found = [folder.parent if folder.name == "bin" else folder for folder in toolchain.executables]
    found += [*toolchain.python, *(Path(part) for value in toolchain.variables.values() for part in value.split(":") if part)]
    held = [Path("/") / name for name in SYSTEM_FOLDERS] + [Path(sys.prefix), Path(sys.base_prefix)]
    folders = sorted({folder.resolve() for folder in found if folder.is_absolute() and folder.is_dir()})
    folders = [folder for folder in folders if not any(folder.is_relative_to(other) for other in held)]
    return [folder for folder in folders if not any(folder != other and folder.is_relative_to(other) for other in folders)]


def environment(toolchain: Toolchain) -> dict[str, str]:
    """ENVIRONMENT with ``toolchain``'s executables first on PATH, its Python folders after
    the tree on PYTHONPATH and its variables."""
    return {**ENVIRONMENT, **toolchain.variables,
            "PATH": ":".join([*map(str, toolchain.executables), SYSTEM_PATH]),
            "PYTHONPATH": ":".join([str(TREE), *map(str, toolchain.python)])}  # fmt: skip


def setup_script(root: Path, tree: Path, out: Path, limits: Limits, toolchain: Toolchain = Toolchain()) -> str:
    """The shell script that, as root in new mount and PID namespaces, builds the sandbox's
    file system at ``root`` (an empty folder), moves into it, drops to SANDBOX_ID and runs
    its arguments in new user, network, mount, IPC and UTS namespaces, with the network's own
    loopback up and its own /sys (what Mininet and ``ip netns`` read)."""
    r = shlex.quote(str(root))
    lines = ["set -eu", f"mount -t tmpfs -o mode=0755,size=16m sandbox {r}", f"cd {r}"]
    for name in SYSTEM_FOLDERS:
        path = Path("/") / name
        if path.is_symlink():
            lines.append(f"ln -s {shlex.quote(os.readlink(path))} {name}")
        elif path.is_dir():
            lines.append(_bind(path, name))
    lines += [  # the private /tmp and /run first: the grader's venv may lie below one of them (a clone in /tmp)
        f"mkdir tmp && mount -t tmpfs -o mode=1777,size={limits.tmp_bytes} tmp tmp",
        f"mkdir run && mount -t tmpfs -o mode=0755,uid={SANDBOX_ID},gid={SANDBOX_ID},size=16m run run",
    ]
    for prefix in sorted({Path(sys.prefix), Path(sys.base_prefix)}):  # the grader's venv and its interpreter
        if not any(prefix.is_relative_to(Path("/") / name) for name in SYSTEM_FOLDERS):
            lines.append(_bind(prefix, shlex.quote(str(prefix).lstrip("/"))))
    lines += [_bind(folder, shlex.quote(str(folder).lstrip("/"))) for folder in toolchain_folders(toolchain)]
    lines += [_bind(tree, str(TREE).lstrip("/")), _bind(out, str(OUT).lstrip("/"), writable=True)]
    for name in WRITABLE_IN_TREE:
        lines.append(f"mount -t tmpfs -o mode=0755,uid={SANDBOX_ID},gid={SANDBOX_ID},size=256m {name} {TREE.relative_to('/')}/{name}")
    lines += [
        "mkdir -p var && { [ -e var/run ] || ln -s /run var/run; } && { [ -e var/tmp ] || ln -s /tmp var/tmp; } && mkdir proc",
        _bind(Path("/sys"), "sys", writable=True),  # only so that the sandbox may mount its network's own, read-write as Mininet's mnexec does
        "mount -t proc -o nosuid,nodev,noexec proc proc",
        "mkdir dev && mount -t tmpfs -o mode=0755,size=1m dev dev",
        *(f"touch dev/{name} && mount --bind /dev/{name} dev/{name}" for name in ("null", "zero", "full", "random", "urandom")),
        "mkdir dev/shm && mount -t tmpfs -o mode=1777,size=64m shm dev/shm && ln -s /proc/self/fd dev/fd",
        "mkdir dev/pts && mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts dev/pts && ln -s pts/ptmx dev/ptmx",
        "mkdir .old && pivot_root . .old && umount -l /.old && rmdir /.old && cd /",
        f"cd {TREE}",
        "exec env -i " + " ".join(f"{key}={shlex.quote(value)}" for key, value in environment(toolchain).items())
        + f" prlimit --as={limits.memory_bytes} --nproc={limits.processes} --core=0 --"
        + f" setpriv --reuid={SANDBOX_ID} --regid={SANDBOX_ID} --clear-groups --no-new-privs --"
        + " unshare --user --map-root-user --net --mount --ipc --uts --"
        + ' sh -c \'ip link set lo up && mount -t sysfs -o nosuid,nodev,noexec sysfs /sys && exec "$@"\' sandbox "$@"',
    ]  # fmt: skip
    return "\n".join(lines)


def run(command: list[str], *, root: Path, tree: Path, out: Path, limits: Limits, toolchain: Toolchain = Toolchain()) -> Outcome:
    """Run ``command`` (its paths as the sandbox sees them: TREE, OUT) in the sandbox, with
    ``toolchain`` (a switch target's tools, installed outside the system's folders) in it.

    ``root`` is an empty folder of the grader's (the sandbox's root is mounted on it, seen
    only inside); ``out`` must be writable by SANDBOX_ID. At ``limits.wall_s`` the run is
    killed: its PID namespace's first process dies, and the kernel kills every other one
    (as it does when the grader itself is killed: unshare dies with it, and its
    --kill-child takes the namespace's first process along). Its memory cgroup is removed
    after it, also when the grader is interrupted.
    """
    for name in WRITABLE_IN_TREE:  # their mount points
        (tree / name).mkdir(exist_ok=True)
    argv = ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", "--",
            "sh", "-c", setup_script(root, tree, out, limits, toolchain), "sandbox", *command]  # fmt: skip
    with contextlib.ExitStack() as stack:
        try:
            cgroup: MemoryCgroup | None = stack.enter_context(memory_cgroup(limits.memory_bytes, "labs-sandbox"))
        except CgroupError as error:
            _no_cgroup(str(error), limits.memory_bytes)
            cgroup = None
        outcome = _run(argv, limits.wall_s, _joining(cgroup))
        return outcome if cgroup is None else dataclasses.replace(outcome, oom_kills=cgroup.oom_kills())


@functools.cache
def _no_cgroup(reason: str, memory_bytes: int) -> None:
    """Say once (per reason) that the cap is per process only."""
    log.warning("no memory cgroup for the sandbox (%s): each process of a submission is capped at %d MB of address space,"
                " not all of them together", reason, memory_bytes >> 20)  # fmt: skip


def _joining(cgroup: MemoryCgroup | None) -> Callable[[], None]:
    """The sandbox's ``preexec_fn``: die with the grader, and enter ``cgroup`` before exec
    (so that every process of the sandbox is in it)."""
    dies = dies_with_this_process()

    def preexec() -> None:
        dies()
        if cgroup is not None:
            cgroup.join()

    return preexec


def _run(argv: list[str], wall_s: float, preexec: Callable[[], None]) -> Outcome:
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace", start_new_session=True, preexec_fn=preexec) as process:  # fmt: skip
        try:
            output, _ = process.communicate(timeout=wall_s)
            return Outcome(process.returncode, output, False)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            return Outcome(process.returncode, output, True)
        except BaseException:  # interrupted: the sandbox goes with the grader
            os.killpg(process.pid, signal.SIGKILL)
            raise


def read_private_file(path: Path, limit: int = 16 << 20) -> bytes | None:
    """A file the sandbox wrote, as root reads it without following a link the submission
    planted there (to a file only root may read); None if it is not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode) or status.st_size > limit:
            return None
        return handle.read(limit)
