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
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

Transmit = Callable[[memoryview | bytes], object]


class DelayLine:
    def __init__(self, hold_s: float) -> None:
        if hold_s <= 0:
            raise ValueError(f"a delay line needs a positive delay, got {hold_s}")
        self.hold_s = hold_s
        self._queue: deque[tuple[float, Transmit, bytes]] = deque()
        self.tx_errors = 0
        """Delayed frames the kernel refused when they were finally sent."""

    def wrap(self, transmit: Transmit) -> Transmit:
        """A transmit function that queues the frame and lets ``release`` send it later."""
        queue, hold_s, clock = self._queue, self.hold_s, time.monotonic

        def delayed(frame: memoryview | bytes) -> None:
            queue.append((clock() + hold_s, transmit, bytes(frame)))

        return delayed

    def due_in(self, now: float) -> float | None:
        """Seconds until the next frame is due (0 if overdue), None if nothing waits."""
        return max(0.0, self._queue[0][0] - now) if self._queue else None

    def release(self, now: float) -> None:
        """Send every frame whose time has come."""
        queue = self._queue
        while queue and queue[0][0] <= now:
            _, transmit, frame = queue.popleft()
            try:
                transmit(frame)
            except OSError:
                self.tx_errors += 1
