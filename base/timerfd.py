"""A CLOCK_MONOTONIC timerfd: a wake-up at an exact moment that an epoll set can wait on.

An epoll wait's timeout is whole milliseconds (Python's ``selectors`` rounds it up), so a
loop that must act at a given moment, not a millisecond later, arms a timer descriptor for
that moment (absolute, on ``time.monotonic``'s clock) and waits on it beside its sockets:
the kernel wakes it with its high-resolution timer. Python has ``os.timerfd_*`` from 3.13;
before, libc's timerfd_create and timerfd_settime are called through ctypes. No PyPI
package for it is maintained.
"""

from __future__ import annotations

import ctypes
import math
import os
import time

from base.linux_sockets import libc

TFD_TIMER_ABSTIME = 1
TFD_NONBLOCK = os.O_NONBLOCK
TFD_CLOEXEC = os.O_CLOEXEC
NS_PER_S = 1_000_000_000


class TimeSpec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class ITimerSpec(ctypes.Structure):
    _fields_ = [("it_interval", TimeSpec), ("it_value", TimeSpec)]


def _checked(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
    return result


def _create() -> int:
    if hasattr(os, "timerfd_create"):
        return os.timerfd_create(time.CLOCK_MONOTONIC, flags=TFD_NONBLOCK | TFD_CLOEXEC)
    return _checked(libc.timerfd_create(time.CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC), "timerfd_create")


def _set_absolute(fd: int, at_ns: int) -> None:
    """One expiry at ``at_ns`` (> 0) on CLOCK_MONOTONIC."""
    if hasattr(os, "timerfd_settime_ns"):
        os.timerfd_settime_ns(fd, flags=TFD_TIMER_ABSTIME, initial=at_ns)
        return
    spec = ITimerSpec(it_value=TimeSpec(*divmod(at_ns, NS_PER_S)))
    _checked(libc.timerfd_settime(fd, TFD_TIMER_ABSTIME, ctypes.byref(spec), None), "timerfd_settime")


class MonotonicTimer:
    """A one-shot timer that fires at a moment of ``time.monotonic()``; readable once it has."""

    def __init__(self) -> None:
        self._fd = _create()

    def fileno(self) -> int:
        return self._fd

    def fire_at(self, moment: float) -> None:
        """Arm for ``moment`` (``time.monotonic()`` seconds; a past moment fires at once),
        replacing any earlier arming and clearing an expiry not yet acknowledged."""
        _set_absolute(self._fd, max(1, math.ceil(moment * NS_PER_S)))

    def acknowledge(self) -> None:
        """Consume the expiry, so the descriptor stops being readable."""
        try:
            os.read(self._fd, 8)
        except BlockingIOError:  # re-armed since it became readable: nothing to consume
            pass

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> MonotonicTimer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
