"""Link propagation delay on the switch's ports, for kernels without netem.

A real link delays every frame by its propagation time; netem emulates that in the
kernel. Where netem is missing, the embedded switch can hold each frame before it leaves
a port: ``hold_s`` is the delay of one link in plus one link out (2 d for links of delay
d), so every host-to-switch-to-host path gets exactly its two links' delay, as on a star.
(On a tree the links between switches are counted at both of their switches.)

This is the wire, not the P4 program: bmv2 has no timers, so the bmv2 target has no
equivalent, and the delay line sits after egress, where the frame would enter the cable.
Frames are copied (the pipeline reuses its buffer) and kept in arrival order; with one
constant delay the queue is FIFO, so releasing is a deque pop.

The line is selectable: its timerfd (base/timerfd.py) is armed for the head frame's due
time whenever the head changes, so the switch's epoll wait wakes when a frame is due, to
the microsecond; an epoll timeout would wake it up to a whole millisecond late.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

from base.timerfd import MonotonicTimer

Transmit = Callable[[memoryview | bytes], object]


class DelayLine:
    def __init__(self, hold_s: float) -> None:
        if hold_s <= 0:
            raise ValueError(f"a delay line needs a positive delay, got {hold_s}")
        self.hold_s = hold_s
        self._queue: deque[tuple[float, Transmit, bytes]] = deque()
        self._timer = MonotonicTimer()
        self.tx_errors = 0
        """Delayed frames the kernel refused when they were finally sent."""

    def fileno(self) -> int:
        """Readable once the head frame is due: register it with the loop's selector."""
        return self._timer.fileno()

    def wrap(self, transmit: Transmit) -> Transmit:
        """A transmit function that queues the frame and lets ``release`` send it later."""
        queue, hold_s, clock, fire_at = self._queue, self.hold_s, time.monotonic, self._timer.fire_at

        def delayed(frame: memoryview | bytes) -> None:
            due = clock() + hold_s
            if not queue:  # the new head
                fire_at(due)
            queue.append((due, transmit, bytes(frame)))

        return delayed

    def release(self, now: float) -> None:
        """Send every frame whose time has come, and arm the timer for the next."""
        self._timer.acknowledge()
        queue = self._queue
        while queue and queue[0][0] <= now:
            _, transmit, frame = queue.popleft()
            try:
                transmit(frame)
            except OSError:
                self.tx_errors += 1
        if queue:
            self._timer.fire_at(queue[0][0])

    def release_due(self) -> None:
        """What the loop calls when the line is readable: release what is due now."""
        self.release(time.monotonic())

    def close(self) -> None:
        self._timer.close()
