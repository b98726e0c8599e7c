"""Run one submission's graded tests where its code can harm nothing and read nothing.

An instructor's grade treats every submission as hostile (labs/README.md, "The sandbox").
Its tests run:

- as an unprivileged user (SANDBOX_ID, no account's) that owns no file of the machine: it
  is root only inside a user namespace of its own, so the graded tests can still create
  network namespaces (labs 2 and 3) and mount their own /sys, and it reads and writes the
  machine's files as nobody would;
- in a mount namespace whose root is a new, empty file system holding read-only views of
  the system's folders, of the grader's Python environment and of the graded tree (a clean
  tree: labs/grade.py's ``clean_tree``), the tools of the track's switch target where they
  are installed outside the system's folders (a prebuilt bmv2 and p4c:
  ``toolchain_folders``), and nothing of the machine that it could write or that outlives
  it: every folder it can write is a size-capped tmpfs of its own (``/tmp``, ``/run``,
  ``/dev/shm``, the tree's ``build/`` and ``results/``, the report folder OUT), and its
  ``/proc`` and ``/sys`` are its own PID and network namespaces'. The reference, the
  instructor's tests folder, every other submission, the machine's ``/sys`` (its BPF
  filesystem, its cgroups) and ``/dev/shm`` are not in it. Its mounts are made by root
  before its user namespace, so they are locked: it can neither unmount nor remount them;
- in a PID namespace of its own (``/proc`` lists only its processes, and all of them die
  with the first), and a network namespace with only a loopback (no network);
- under caps (``Limits``): wall-clock time (the whole run is killed at ``wall_s``); memory
  and CPU time of all its processes together (cgroups of its own, base/cgroup.py: a
  submission that forks gets no more between its processes than one would), the memory
  cap also on each process's address space (RLIMIT_AS: one process asking for more fails at
  once with a MemoryError, and the only memory cap where no cgroup can be made, which the
  grader logs once); the number of its processes (RLIMIT_NPROC); the size of each folder it
  can write; and what of its output the grader keeps (``output_bytes``: its first and last
  halves, and a line saying how much was cut).

What it writes in OUT reaches the grader's ``out`` folder after it ended (all its
processes dead): regular files and folders only, at most ``report_bytes``. What the
grader put in ``out`` before (its inputs) is in OUT when it starts.

The namespaces and the file system are bubblewrap's (``bwrap``, run as root: it builds
them as root, so the user namespace made after it locks them); where bubblewrap is not
installed, a shell script with util-linux's unshare and pivot_root builds the same, and
the grader says so once. Either way it needs root, util-linux (unshare, setpriv, prlimit)
and iproute2's ip, all in Debian's base system.
"""

from __future__ import annotations

import functools
import logging
import os
import pwd
import secrets
import select
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from base.cgroup import CappedGroup, capped_group
from base.lifetime import dies_with_this_process
from switches.target import Toolchain

log = logging.getLogger(__name__)

SANDBOX_ID = 64_399
"""The user and group id the submission runs as: in Debian's range for dynamic system users,
and checked to be no account's (``check_can_sandbox``)."""
TREE, OUT = Path("/grade/tree"), Path("/grade/out")
"""Where the graded tree (read-only) and the report's folder (writable) are inside."""
GRADER = Path("/.grader")
"""Inside, root's alone (mode 0700): the grader's ``out`` (where OUT is copied to and from)
and the sysfs the submission's own /sys may be mounted beside (the kernel mounts a new
sysfs only where one is already fully visible)."""
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
RUN_BYTES, SHM_BYTES = 16 << 20, 64 << 20
"""The sizes of its /run (the network lock, ``ip netns``'s files) and /dev/shm."""
DRAIN_S = 10.0
"""How long the output of a killed sandbox is still read."""


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
    """Its /tmp (in memory, as every folder it writes: charged to its memory too)."""
    disk_bytes: int = 256 << 20
    """Each of the tree's writable folders (build/, results/)."""
    report_bytes: int = 64 << 20
    """OUT: the most it can leave on the grader's disk."""
    output_bytes: int = 1 << 20
    """What the grader keeps of its standard output and error: the first and last halves."""
    cpus: float = 1.0
    """Cores' worth of CPU time, all its processes together (a cgroup's CPU quota)."""

    def writable(self) -> dict[Path, int]:
        """Every folder it can write, and its size."""
        return {Path("/tmp"): self.tmp_bytes, Path("/run"): RUN_BYTES, Path("/dev/shm"): SHM_BYTES,
                **{TREE / name: self.disk_bytes for name in WRITABLE_IN_TREE}, OUT: self.report_bytes}  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    returncode: int
    output: str
    """What it printed, cut in the middle past ``Limits.output_bytes`` (a line says so)."""
    timed_out: bool
    oom_kills: int = 0
    """Processes the kernel killed for reaching the memory cap of all of them together."""
    output_bytes: int = 0
    """All it printed, also what was cut."""
    full: tuple[str, ...] = ()
    """The folders it filled to their cap."""
    cpu_throttled_s: float = 0.0
    """How long its processes waited, together, for their CPU quota (a cap it reached, which
    only slows it)."""
    capped: str | None = None
    """The caps that cut it short, as the grade's report says them; None if none did."""


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


def _on_path(tool: str) -> str | None:
    return shutil.which(tool, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin:/usr/bin:/bin")


BWRAP_OPTIONS = ("--size", "--perms", "--as-pid-1", "--die-with-parent")
"""The options of bubblewrap the sandbox uses: a bwrap too old to have one of them is not used."""


def find_bwrap() -> str | None:
    """bubblewrap's bwrap, where it is installed (Debian's package bubblewrap) and new
    enough (BWRAP_OPTIONS)."""
    bwrap = _on_path("bwrap")
    return bwrap if bwrap is not None and _bwrap_can(bwrap) else None


@functools.cache
def _bwrap_can(bwrap: str) -> bool:
    done = subprocess.run([bwrap, "--help"], capture_output=True, text=True, check=False)
    lacking = [option for option in BWRAP_OPTIONS if option not in done.stdout + done.stderr]
    if lacking:
        log.warning("%s lacks %s (bubblewrap too old): the sandbox is built without it", bwrap, ", ".join(lacking))
    return not lacking


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


def _read_only_folders(toolchain: Toolchain) -> list[Path]:
    """Bound read-only at their own path, after the system's folders and the private /tmp
    and /run (the grader's venv may lie below one of them: a clone in /tmp): the grader's
    venv and its interpreter, and ``toolchain``'s folders."""
    prefixes = sorted({Path(sys.prefix), Path(sys.base_prefix)})
    prefixes = [prefix for prefix in prefixes if not any(prefix.is_relative_to(Path("/") / name) for name in SYSTEM_FOLDERS)]
    return [*prefixes, *toolchain_folders(toolchain)]


PROC = "mount -t proc -o nosuid,nodev,noexec,hidepid=2 proc /proc"
"""The sandbox's /proc, of its outer PID namespace: root's processes there (the first) are hidden."""


def confine_script(limits: Limits, toolchain: Toolchain, marker: str, *, proc: bool = True) -> str:
    """What runs as root in the built sandbox, as the first process of its PID namespace:
    mount its /proc and the sysfs the submission's own /sys needs beside it (root's
    alone), give the writable folders to SANDBOX_ID and copy the grader's inputs into OUT;
    say after ``marker`` that it is built; run its arguments as SANDBOX_ID in new user,
    network, mount, PID, IPC and UTS namespaces, with their own loopback up, /proc and /sys,
    under the per-process caps; once they are all dead, copy OUT's files and folders to the
    grader's folder and say after ``marker`` which folders they filled."""
    q = shlex.quote
    writable = " ".join(q(str(path)) for path in limits.writable())
    owned = " ".join(q(str(path)) for path in [Path("/run"), *(TREE / name for name in WRITABLE_IN_TREE), OUT])
    report = q(str(GRADER / "out"))
    variables = " ".join(f"{key}={q(value)}" for key, value in environment(toolchain).items())
    return "\n".join([
        "set -eu",
        PROC if proc else "",
        f"mount -t sysfs sysfs {GRADER}/sys",
        f"chown {SANDBOX_ID}:{SANDBOX_ID} {owned}",
        f"cp -R {report}/. {OUT}/",
        f"echo {q(marker)} started",
        "set +e",
        f"(cd {TREE} && exec env -i {variables}"
        f" prlimit --as={limits.memory_bytes} --nproc={limits.processes} --core=0 --"
        f" setpriv --reuid={SANDBOX_ID} --regid={SANDBOX_ID} --clear-groups --no-new-privs --"
        " unshare --user --map-root-user --net --mount --pid --fork --kill-child --mount-proc --ipc --uts --"
        ' sh -c \'ip link set lo up && mount -t sysfs -o nosuid,nodev,noexec sysfs /sys && exec "$@"\' sandbox "$@")',
        "status=$?",
        "kill -KILL -1 2>/dev/null",  # none is left (its PID namespace died with its first process): in case
        f"find {OUT} -mindepth 1 ! -type f ! -type d -delete",  # no link, pipe or device reaches the grader
        f"cp -R {OUT}/. {report}/",
        f"for folder in {writable}; do [ \"$(stat -f -c %a \"$folder\")\" -gt 0 ] || echo {q(marker)} full \"$folder\"; done",
        'exit "$status"',
    ])  # fmt: skip


def bwrap_command(bwrap: str, tree: Path, out: Path, limits: Limits, toolchain: Toolchain, marker: str) -> list[str]:
    """bubblewrap's command line that builds the sandbox and runs ``confine_script`` in it."""
    argv = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--die-with-parent", "--as-pid-1", "--cap-add", "ALL"]  # fmt: skip
    for name in SYSTEM_FOLDERS:
        path = Path("/") / name
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    argv += ["--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp", "--size", str(RUN_BYTES), "--tmpfs", "/run"]
    for source, target in [*((folder, folder) for folder in _read_only_folders(toolchain)), (tree, TREE)]:
        argv += [*_parents(target), "--ro-bind", str(source), str(target)]
    for name in WRITABLE_IN_TREE:
        argv += ["--size", str(limits.disk_bytes), "--tmpfs", str(TREE / name)]
    argv += ["--size", str(limits.report_bytes), "--tmpfs", str(OUT),
             "--dir", "/var", "--symlink", "../run", "/var/run", "--symlink", "../tmp", "/var/tmp",
             "--dev", "/dev", "--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm",
             "--dir", "/proc", "--dir", "/sys",
             "--perms", "0700", "--dir", str(GRADER), "--dir", str(GRADER / "sys"), "--bind", str(out), str(GRADER / "out"),
             "--chdir", "/", "--", "sh", "-c", confine_script(limits, toolchain, marker), "sandbox"]  # fmt: skip
    return argv


def _parents(target: Path) -> list[str]:
    """bubblewrap's options that make ``target``'s parent folders, 0755 (its own would be
    0700: the sandbox's user could not pass)."""
    return [option for parent in reversed(target.parents[:-1]) for option in ("--dir", str(parent))]


def _bind(source: Path, target: str, *, writable: bool = False) -> str:
    mode = "" if writable else " -o ro"
    return f"mkdir -p {target}\nmount --rbind{mode} {shlex.quote(str(source))} {target}"


def _tmpfs(target: str, size: int, mode: str = "0755") -> str:
    return f"mkdir -p {target}\nmount -t tmpfs -o mode={mode},size={size} tmpfs {target}"


def setup_script(root: Path, tree: Path, out: Path, limits: Limits, toolchain: Toolchain, marker: str) -> str:
    """Where bubblewrap is missing: the shell script that, as root in new mount, PID and
    network namespaces, builds at ``root`` (an empty folder) the file system bubblewrap
    would, moves into it and runs ``confine_script``."""
    r = shlex.quote(str(root))
    lines = ["set -eu", f"mount -t tmpfs -o mode=0755,size=16m sandbox {r}", f"cd {r}"]
    for name in SYSTEM_FOLDERS:
        path = Path("/") / name
        if path.is_symlink():
            lines.append(f"ln -s {shlex.quote(os.readlink(path))} {name}")
        elif path.is_dir():
            lines.append(_bind(path, name))
    lines += [_tmpfs("tmp", limits.tmp_bytes, "1777"), _tmpfs("run", RUN_BYTES)]
    lines += [_bind(folder, shlex.quote(str(folder).lstrip("/"))) for folder in _read_only_folders(toolchain)]
    lines.append(_bind(tree, str(TREE).lstrip("/")))
    lines += [_tmpfs(str(TREE / name).lstrip("/"), limits.disk_bytes) for name in WRITABLE_IN_TREE]
    grader = str(GRADER).lstrip("/")
    lines += [
        _tmpfs(str(OUT).lstrip("/"), limits.report_bytes),
        "mkdir var proc sys", "ln -s ../run var/run", "ln -s ../tmp var/tmp",
        PROC.replace(" /proc", " proc"),  # before pivot_root: umount reads the mount table there
        _tmpfs("dev", 1 << 20),
        *(f"touch dev/{name}\nmount --bind /dev/{name} dev/{name}" for name in ("null", "zero", "full", "random", "urandom")),
        _tmpfs("dev/shm", SHM_BYTES, "1777"), "ln -s /proc/self/fd dev/fd", "mkdir dev/pts",
        "mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts dev/pts", "ln -s pts/ptmx dev/ptmx",
        f"mkdir -m 0700 {grader}", f"mkdir {grader}/sys", _bind(out, f"{grader}/out", writable=True),
        "mkdir .old", "pivot_root . .old", "umount -l /.old", "rmdir /.old", "cd /",  # one line each: set -e stops at a failure
        confine_script(limits, toolchain, marker, proc=False),
    ]  # fmt: skip
    return "\n".join(lines)


def run(command: list[str], *, root: Path, tree: Path, out: Path, limits: Limits, toolchain: Toolchain = Toolchain()) -> Outcome:
    """Run ``command`` (its paths as the sandbox sees them: TREE, OUT) in the sandbox, with
    ``toolchain`` (a switch target's tools, installed outside the system's folders) in it.

    ``root`` is an empty folder of the grader's (where bubblewrap is missing, the sandbox's
    root is mounted on it, seen only inside); ``out`` holds the grader's inputs, and the
    sandbox's report after it. At ``limits.wall_s`` the run is killed: its PID namespace's
    first process dies, and the kernel kills every other one (as it does when the grader
    itself is killed: bwrap or unshare dies with it, and takes the namespace's first process
    along). Its cgroups are removed after it, also when the grader is interrupted.
    """
    for name in WRITABLE_IN_TREE:  # their mount points
        (tree / name).mkdir(exist_ok=True)
    marker = f"sandbox-{secrets.token_hex(16)}"
    """What the sandbox's own lines start with (it is built; a folder is full): the
    submission, never shown the script, cannot print them."""
    bwrap = find_bwrap()
    if bwrap is not None:
        argv = bwrap_command(bwrap, tree, out, limits, toolchain, marker)
    else:
        _no_bwrap()
        argv = ["unshare", "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "--kill-child", "--propagation", "private",
                "--", "sh", "-c", setup_script(root, tree, out, limits, toolchain, marker), "sandbox"]  # fmt: skip
    with capped_group("labs-sandbox", memory_bytes=limits.memory_bytes, cpus=limits.cpus) as group:
        for controller, reason in group.missing.items():
            _no_cgroup(controller, reason, limits)
        returncode, output, total, timed_out = _run([*argv, *command], limits, _joining(group))
        lines = [line.partition(f"{marker} ") for line in output.split("\n")]  # the submission's last line may lack its end
        said = [what for _, mark, what in lines if mark]
        output = "\n".join(before for before, mark, _ in lines if before or not mark)
        if "started" not in said and not timed_out:
            last = output.strip().splitlines()[-1] if output.strip() else "it printed nothing"
            raise SandboxError(f"the sandbox could not be built (exit status {returncode}): {last}")
        full = tuple(what.removeprefix("full ") for what in said if what.startswith("full "))
        return _outcome(returncode, output, timed_out, total, full, group, limits)


def _outcome(returncode: int, output: str, timed_out: bool, total: int, full: tuple[str, ...], group: CappedGroup,
             limits: Limits) -> Outcome:  # fmt: skip
    oom_kills = group.oom_kills()
    capped = []
    if oom_kills:
        capped.append(f"the submission's processes together reached its {limits.memory_bytes >> 20} MB memory cap:"
                      f" the kernel killed {oom_kills} of them")  # fmt: skip
    if full:
        sizes = limits.writable()
        capped.append("the submission filled " + ", ".join(f"{folder} ({sizes[Path(folder)] >> 20} MB)" for folder in full)
                      + ", the sandbox's cap: its writes there failed")  # fmt: skip
    if total > limits.output_bytes:
        capped.append(f"the submission printed {total / 1e6:.1f} MB: the grader kept its first and last"
                      f" {limits.output_bytes >> 11} KiB")  # fmt: skip
    return Outcome(returncode, output, timed_out, oom_kills, total, full, round(group.cpu_throttled_s(), 2),
                   "; ".join(capped) or None)  # fmt: skip


@functools.cache
def _no_bwrap() -> None:
    log.warning("bubblewrap (bwrap) is not installed: the sandbox is built by a shell script with util-linux's unshare"
                " and pivot_root instead (apt-get install bubblewrap)")  # fmt: skip


@functools.cache
def _no_cgroup(controller: str, reason: str, limits: Limits) -> None:
    """Say once (per cap and reason) what is capped per process only, or not at all."""
    if controller == "memory":
        log.warning("no memory cgroup for the sandbox (%s): each process of a submission is capped at %d MB of address space,"
                    " not all of them together", reason, limits.memory_bytes >> 20)  # fmt: skip
    else:
        log.warning("no %s cgroup for the sandbox (%s): a submission's processes may keep every core busy", controller, reason)


def _joining(group: CappedGroup) -> Callable[[], None]:
    """The sandbox's ``preexec_fn``: die with the grader, and enter ``group``'s cgroups
    before exec (so that every process of the sandbox is in them)."""
    dies = dies_with_this_process()

    def preexec() -> None:
        dies()
        group.join()

    return preexec


def _run(argv: list[str], limits: Limits, preexec: Callable[[], None]) -> tuple[int, str, int, bool]:
    """Run ``argv`` until it ends or ``limits.wall_s`` passes (then kill it): its exit
    status, its output (capped: ``_Capped``), how many bytes it printed, whether it timed out."""
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          start_new_session=True, preexec_fn=preexec) as process:  # fmt: skip
        kept = _Capped(limits.output_bytes)
        try:
            timed_out = not kept.read(process.stdout, time.monotonic() + limits.wall_s)
            if timed_out:
                os.killpg(process.pid, signal.SIGKILL)
                kept.read(process.stdout, time.monotonic() + DRAIN_S)
        except BaseException:  # interrupted: the sandbox goes with the grader
            os.killpg(process.pid, signal.SIGKILL)
            raise
        process.stdout.close()
        return process.wait(), kept.text(), kept.total, timed_out


class _Capped:
    """A stream's first and last ``cap / 2`` bytes, and how many there were: the grader's
    memory stays bounded however much a submission prints, and the last line (what a test
    that did not run says) is kept."""

    def __init__(self, cap: int) -> None:
        self.half = cap // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def read(self, stream, deadline: float) -> bool:
        """Read ``stream`` to its end (True) or until ``deadline`` (False)."""
        fd = stream.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                return False
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return True
            self.total += len(chunk)
            room = self.half - len(self.head)
            self.head += chunk[:room]
            self.tail += chunk[max(room, 0) :]
            del self.tail[: max(len(self.tail) - self.half, 0)]

    def text(self) -> str:
        cut = self.total - len(self.head) - len(self.tail)
        middle = f"\n[... {cut} bytes of output cut here: the grader keeps the first and last {self.half} ...]\n" if cut else ""
        return self.head.decode(errors="replace") + middle + self.tail.decode(errors="replace")


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
