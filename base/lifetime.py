"""How long what a run starts lives: no longer than the run, and long enough to be torn down.

Two guarantees the kernel can give and Python cannot:

- ``dies_with_this_process()`` is a ``preexec_fn`` that asks the kernel to SIGKILL the
  child when the process that started it dies (``PR_SET_PDEATHSIG``). Without it, a
  runner killed with SIGKILL leaves its workers and switch running: the workers keep the
  hosts' namespaces, and with them the switch's veths, alive until their own time limits
  pass, and every run started meanwhile fails on "File exists". (The setting survives
  exec, so it holds for ``mnexec ... python -m hosts.worker`` and for simple_switch.)
- ``deferred_signals()`` blocks the stop signals (STOP_SIGNALS) while a teardown runs, so an impatient
  second Ctrl-C cannot cut it short and leak namespaces, veths or processes; the signal is
  delivered, and acted on, right after.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
from typing import Callable, Iterator

PR_SET_PDEATHSIG = 1
_prctl = ctypes.CDLL(None, use_errno=True).prctl  # resolved here, not in the forked child
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
