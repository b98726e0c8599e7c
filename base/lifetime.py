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
  them and a death is named at once instead of a run waiting out its time limits.
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


class DependencyExited(RuntimeError):
    """A process the run depends on (a switch, a host's shell) exited while it ran."""


class Dependencies:
    """Pidfds of the processes a run depends on, by what they are ("switch s1", "the shell
    of host h3"). Each pid must be a child of this process, so that it cannot be reused
    before its owner reaps it."""

    def __init__(self, processes: Mapping[str, int]) -> None:
        self.fds: dict[int, tuple[str, int]] = {}
        try:
            for label, pid in processes.items():
                self.fds[os.pidfd_open(pid)] = (label, pid)
        except BaseException:
            self.close()
            raise

    def exited(self, wait_s: float = 0.0) -> DependencyExited | None:
        """The first dependency that has exited (waiting up to ``wait_s`` for one), or None.
        A dying process closes its files before its exit is signalled, so an error it caused
        may precede the news by a moment: ``wait_s`` is that moment."""
        ready = select.select(list(self.fds), [], [], wait_s)[0] if self.fds else []
        return exited_error(*self.fds[ready[0]]) if ready else None

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds.clear()


def exited_error(label: str, pid: int) -> DependencyExited:
    return DependencyExited(f"{label} (pid {pid}) exited with status {exit_status(pid)}")


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
