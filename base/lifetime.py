"""How long what a run starts lives: no longer than the run, and long enough to be torn down.

Two guarantees the kernel can give and Python cannot:

- ``dies_with_this_process()`` is a ``preexec_fn`` that asks the kernel to SIGKILL the
  child when the process that started it dies (``PR_SET_PDEATHSIG``). Without it, a
  runner killed with SIGKILL leaves its workers and switch running: the workers keep the
  hosts' namespaces, and with them the switch's veths, alive until their own time limits
  pass, and every run started meanwhile fails on "File exists". (The setting survives
  exec, so it holds for ``mnexec ... python -m hosts.worker`` and for simple_switch.)
- ``Dependencies`` watches processes a run needs but does not wait for (host shells,
  switches): each is a pidfd, readable the moment its process exits, so a wait can include
  them and a death is named at once instead of a run waiting out its time limits. A thread
  the run needs (bmv2's learning controller) is watched the same way through a
  ``ThreadWatch``, a pipe that turns readable when the thread ends (a thread has no pidfd
  before Linux 6.9).
- ``stopped(pid)`` tells a process stopped by a signal (SIGSTOP: state T) from one that
  runs: when a job misses its deadline, a stopped worker or switch is its cause, not the
  rank that happened to time out first (``Dependencies.stopped``).
- ``deferred_signals()`` blocks the stop signals (STOP_SIGNALS) while a teardown runs, so an impatient
  second Ctrl-C cannot cut it short and leak namespaces, veths or processes; the signal is
  delivered, and acted on, right after.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
from typing import Callable, Iterator, Mapping

PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
EXIT_NOTICE_S = 0.5
"""A dying process closes its files and sockets before its exit is signalled: how long an
error may precede the news of the death that caused it."""
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
"""What stops a run with its teardown: Ctrl-C, kill's default, the terminal closing
(hang-up) and Ctrl-\\. Left to their default actions, SIGHUP and SIGQUIT would end the
process at once, leaving its namespaces, veths and processes behind."""


def dies_with_this_process() -> Callable[[], None]:
    """A ``preexec_fn`` for Popen: the child is killed when the calling process dies.

    It runs in the forked child before exec, so it only calls prctl and getppid. If the
    parent died between fork and prctl, the signal would never come: the child checks
    that its parent is still the process that forked it, and kills itself otherwise.
    """
    parent = os.getpid()

    def arm() -> None:
        if _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return arm


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """Hold the stop signals until the block is done (they are delivered afterwards).

    Children started inside inherit the blocked mask, which is harmless for what a
    teardown starts (ip, tc: short commands that are not meant to be interrupted).
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class DependencyFailed(RuntimeError):
    """Something the run depends on (a switch, a host's shell, a switch's thread) failed."""


class DependencyExited(DependencyFailed):
    """A process the run depends on (a switch, a host's shell) exited while it ran, or a
    thread it depends on ended."""


class DependencyStopped(DependencyFailed):
    """A process the run depends on was stopped (SIGSTOP) while it ran: it makes no progress."""


class ThreadWatch:
    """A thread's counterpart of a pidfd: ``fileno()`` turns readable when the thread ends.
    The thread runs its work inside ``running()``, which records the error that ended it."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        self.error: BaseException | None = None

    def fileno(self) -> int:
        return self._read

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        try:
            yield
        except BaseException as error:
            self.error = error
            raise
        finally:
            os.close(self._write)

    def ended(self) -> str:
        """How the thread ended, for a message."""
        return "ended" if self.error is None else f"ended with {type(self.error).__name__}: {self.error}"

    def close(self) -> None:
        """Close the watching end (the thread's end closes when the thread ends)."""
        os.close(self._read)


Dependency = int | ThreadWatch
"""A process by its pid (a child of this process), or a thread by its watch."""


class Dependencies:
    """What a run depends on, by what each is ("switch s1", "the shell of host h3", "the L2
    learning controller of switch s1"), as file descriptors that turn readable when it ends:
    a pidfd per process, a ``ThreadWatch`` per thread. Each pid must be a child of this
    process, so that it cannot be reused before its owner reaps it."""

    def __init__(self, watched: Mapping[str, Dependency]) -> None:
        self.fds: dict[int, tuple[str, Dependency]] = {}
        self._pidfds: list[int] = []
        try:
            for label, what in watched.items():
                if isinstance(what, ThreadWatch):
                    self.fds[what.fileno()] = (label, what)
                else:
                    fd = os.pidfd_open(what)
                    self._pidfds.append(fd)
                    self.fds[fd] = (label, what)
        except BaseException:
            self.close()
            raise

    def exited(self, wait_s: float = 0.0) -> DependencyExited | None:
        """The first dependency that has exited (waiting up to ``wait_s`` for one), or None.
        A dying process closes its files before its exit is signalled, so an error it caused
        may precede the news by a moment: ``wait_s`` is that moment."""
        ready = select.select(list(self.fds), [], [], wait_s)[0] if self.fds else []
        return exited_error(*self.fds[ready[0]]) if ready else None

    def stopped(self) -> DependencyStopped | None:
        """The first dependency process that is stopped (SIGSTOP), or None."""
        for label, what in self.fds.values():
            if not isinstance(what, ThreadWatch) and stopped(what):
                return DependencyStopped(f"{label} (pid {what}) {stopped_evidence(what)}")
        return None

    def close(self) -> None:
        for fd in self._pidfds:
            os.close(fd)
        self._pidfds.clear()
        self.fds.clear()


def exited_error(label: str, what: Dependency) -> DependencyExited:
    if isinstance(what, ThreadWatch):
        return DependencyExited(f"{label} {what.ended()}")
    return DependencyExited(f"{label} (pid {what}) exited with status {exit_status(what)}")


STOPPED_STATES = ("T", "t")
"""/proc/PID/stat's states of a process that cannot run until continued: stopped by a
signal (SIGSTOP, SIGTSTP, ...) or by a tracer."""


def stopped(pid: int) -> bool:
    """Whether ``pid`` is stopped (STOPPED_STATES); False when it is gone or runs."""
    return process_state(pid) in STOPPED_STATES


def process_state(pid: int) -> str | None:
    """``pid``'s state letter in /proc/PID/stat; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat_state(stat.read())
    except OSError:
        return None


def stat_state(stat: str) -> str | None:
    """The state letter of a /proc/PID/stat line (of this machine or another server)."""
    try:
        return stat.rsplit(")", 1)[1].split()[0]
    except IndexError:
        return None


def stopped_evidence(pid: int, state: str | None = None) -> str:
    """What says that ``pid`` is the cause of a stall, for a message: ``state`` (its
    /proc/PID/stat state, read here when not given) says how it was stopped."""
    state = state or process_state(pid) or "T"
    how = "as after SIGSTOP" if state == "T" else "held by a tracer, a debugger's breakpoint or ptrace stop"
    return f"is stopped (state {state} in /proc/{pid}/stat, {how}) and made no progress"


def exit_status(pid: int) -> int | str:
    """A dead child's exit status as subprocess reports it (-9 for SIGKILL), without reaping
    it: its owner (Mininet's node, the switch launcher) still waits for it."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return "unknown (not a child of the runner)"
    if info is None:
        return "unknown (still running)"
    return -info.si_status if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED) else info.si_status
