"""One direction of a simulated cable: a drop-tail FIFO queue, serialization at the link
rate, propagation delay, and random loss.

The queue is computed, not stepped: a frame handed to the link at time t starts when the
frame before it has left (``free_at``) and is on the wire for ``8 * bytes / rate``, so only
its arrival at the far end is an event. The queue holds at most ``queue_packets`` frames,
the one being serialized included (as a pfifo of that limit in front of an htb class that
sends one at a time); a frame that finds it full is dropped, counted in ``queue_drops``.
Arrivals are delivered in batches: every frame due at the same instant in one call (a
multicast's copies, frames of equal links that left together), and the next arrival is
the only event the link keeps scheduled.

``loss`` is the probability that a frame is lost on the wire: it takes its serialization
time and never arrives (independent per frame, each direction on its own: the loss model
of netem's ``loss random``, which the emulator applies per link direction).
"""

from __future__ import annotations

import random
from collections import deque
from typing import Callable

import simpy

SAME_INSTANT_S = 1e-12
"""Arrivals closer than this to the event's time arrive with it (float rounding of sums
of serialization times and delays, far below any time a frame takes)."""

Deliver = Callable[[list[bytes]], None]


class Link:
    """One direction of a link: ``send`` a frame at the simulated now; the far end's
    ``deliver`` gets it when it has crossed."""

    __slots__ = ("_env", "_seconds_per_byte", "_delay_s", "_queue_packets", "_loss", "_random", "_deliver",
                 "_departures", "_free_at", "_in_flight", "_armed", "frames", "bytes", "queue_drops", "lost")

    def __init__(self, env: simpy.Environment, rate_bps: float, delay_s: float, queue_packets: int, loss: float,
                 rng: random.Random, deliver: Deliver) -> None:
        if rate_bps <= 0 or delay_s < 0 or queue_packets < 1 or not 0 <= loss <= 1:
            raise ValueError(f"a link needs rate > 0, delay >= 0, a queue of >= 1 packet and loss in [0, 1]; got "
                             f"{rate_bps} bit/s, {delay_s} s, {queue_packets} packets, loss {loss}")
        self._env = env
        self._seconds_per_byte = 8.0 / rate_bps
        self._delay_s = delay_s
        self._queue_packets = queue_packets
        self._loss = loss
        self._random = rng.random
        self._deliver = deliver
        self._departures: deque[float] = deque()
        """When each frame in the queue (the one on the wire first) has left."""
        self._free_at = 0.0
        self._in_flight: deque[tuple[float, bytes]] = deque()
        self._armed = False
        self.frames = 0
        """Frames that entered the queue."""
        self.bytes = 0
        self.queue_drops = 0
        self.lost = 0

    def send(self, frame: bytes) -> None:
        now = self._env.now
        departures = self._departures
        while departures and departures[0] <= now:
            departures.popleft()
        if len(departures) >= self._queue_packets:
            self.queue_drops += 1
            return
        finish = max(now, self._free_at) + len(frame) * self._seconds_per_byte
        self._free_at = finish
        departures.append(finish)
        self.frames += 1
        self.bytes += len(frame)
        if self._loss and self._random() < self._loss:
            self.lost += 1
            return
        self._in_flight.append((finish + self._delay_s, frame))
        if not self._armed:
            self._arm()

    def _arm(self) -> None:
        self._armed = True
        self._env.timeout(max(0.0, self._in_flight[0][0] - self._env.now)).callbacks.append(self._arrive)

    def _arrive(self, _event: simpy.Event) -> None:
        due = self._env.now + SAME_INSTANT_S
        in_flight = self._in_flight
        arrived = []
        while in_flight and in_flight[0][0] <= due:
            arrived.append(in_flight.popleft()[1])
        self._armed = False
        if in_flight:
            self._arm()
        self._deliver(arrived)
