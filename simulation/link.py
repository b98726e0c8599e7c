"""One direction of a simulated cable: a drop-tail FIFO queue, serialization at the link
rate, propagation delay, and random loss.

The queue is computed, not stepped: a frame handed to the link at time t starts when the
frame before it has left (``free_at``) and is on the wire for ``8 * bytes / rate``, so only
its arrival at the far end is an event. The queue holds at most ``queue_packets`` frames,
the one being serialized included (as a pfifo of that limit in front of an htb class that
sends one at a time); a frame that finds it full is dropped, counted in ``queue_drops``.
Arrivals are delivered in batches (``Arrivals``): every frame of the network due at the
same instant is one event (a multicast's copies, the updates of equal links that left
together: 8 workers' frames at 100 Gbit/s are 2 events per round of the pool, not 16),
which a profile of the main job found to be a sixth of its wall time.

``burst_bytes`` (default 0) gives the link htb's token bucket of that depth, filled at the
link rate: a frame leaves at once when the bucket is out of debt and its bytes are charged
as it leaves, so the bucket may go into debt by one frame, which the next frame waits out.
That is the emulator's link, an htb class on a veth pair (network/shaping.py,
HTB_CBURST_BYTES): after an idle spell two frames of 1 KiB cross at once, then the link
rate holds. With 0 every frame takes its full serialization time, as on a wire.

``loss`` is the probability that a frame is lost on the wire: it takes its serialization
time and never arrives (independent per frame, each direction on its own: the loss model
of netem's ``loss random``, which the emulator applies per link direction).
"""

from __future__ import annotations

import functools
import random
from collections import deque
from typing import Callable

import simpy

Deliver = Callable[[list[bytes]], None]


class Arrivals:
    """Every frame in flight on a network's links, by the instant it arrives: one SimPy
    event per instant, however many frames (of however many links) it brings. Frames of
    one instant are delivered in the order they were sent."""

    def __init__(self, env: simpy.Environment) -> None:
        self._env = env
        self._due: dict[float, list[tuple[Deliver, bytes]]] = {}

    def add(self, at: float, deliver: Deliver, frame: bytes) -> None:
        bucket = self._due.get(at)
        if bucket is None:
            bucket = self._due[at] = []
            self._env.timeout(at - self._env.now).callbacks.append(functools.partial(self._arrive, at))
        bucket.append((deliver, frame))

    def _arrive(self, at: float, _event: simpy.Event) -> None:
        bucket = self._due.pop(at)
        frames: list[bytes] = []
        current = bucket[0][0]
        for deliver, frame in bucket:  # consecutive frames for one receiver go as one batch
            if deliver is not current:
                current(frames)
                current, frames = deliver, []
            frames.append(frame)
        current(frames)


class Link:
    """One direction of a link: ``send`` a frame at the simulated now; the far end's
    ``deliver`` gets it when it has crossed."""

    __slots__ = ("_env", "_arrivals", "_seconds_per_byte", "_delay_s", "_queue_packets", "_loss", "rng", "_random", "_deliver",
                 "_departures", "_free_at", "_burst", "_tokens", "frames", "bytes", "queue_drops", "lost")

    def __init__(self, env: simpy.Environment, arrivals: Arrivals, rate_bps: float, delay_s: float, queue_packets: int, loss: float,
                 rng: random.Random, deliver: Deliver, burst_bytes: float = 0.0) -> None:
        if rate_bps <= 0 or delay_s < 0 or queue_packets < 1 or not 0 <= loss <= 1 or burst_bytes < 0:
            raise ValueError(f"a link needs rate > 0, delay >= 0, a queue of >= 1 packet, loss in [0, 1] and a burst >= 0; got "
                             f"{rate_bps} bit/s, {delay_s} s, {queue_packets} packets, loss {loss}, burst {burst_bytes} bytes")
        self._env = env
        self._arrivals = arrivals
        self._seconds_per_byte = 8.0 / rate_bps
        self._delay_s = delay_s
        self._queue_packets = queue_packets
        self._loss = loss
        self.rng = rng
        """Its loss draws (``random()`` per frame sent, when loss > 0)."""
        self._random = rng.random
        self._deliver = deliver
        self._departures: deque[float] = deque()
        """When each frame in the queue (the one on the wire first) has left."""
        self._free_at = 0.0
        self._burst = burst_bytes
        self._tokens = burst_bytes
        """Bytes the bucket held at ``free_at``: negative, the debt of the frame that left then."""
        self.frames = 0
        """Frames that entered the queue."""
        self.bytes = 0
        self.queue_drops = 0
        self.lost = 0

    @property
    def seconds_per_byte(self) -> float:
        """Serialization time of one byte at the link's rate."""
        return self._seconds_per_byte

    @property
    def model(self) -> tuple[float, float, int, float, float]:
        """(seconds per byte, delay s, queue packets, loss, burst bytes): what the link is."""
        return self._seconds_per_byte, self._delay_s, self._queue_packets, self._loss, self._burst

    @property
    def queue(self) -> tuple[float, float, list[float]]:
        """(free_at, tokens, departures): the queue's state, which another event loop may
        take over and hand back (simulation/switchml/native/star.py) with ``set_queue``."""
        return self._free_at, self._tokens, list(self._departures)

    def depth(self) -> int:
        """Frames in the queue now, the one on the wire included: what a frame sent now would join."""
        now = self._env.now
        return sum(1 for departure in self._departures if departure > now)

    def set_queue(self, free_at: float, tokens: float, departures: list[float]) -> None:
        self._free_at, self._tokens = free_at, tokens
        self._departures = deque(departures)

    def send(self, frame: bytes) -> None:
        now = self._env.now
        departures = self._departures
        while departures and departures[0] <= now:
            departures.popleft()
        if len(departures) >= self._queue_packets:
            self.queue_drops += 1
            return
        start = max(now, self._free_at)
        if self._burst:  # htb's rule: a frame leaves once the bucket is out of debt, and its bytes are charged as it leaves
            tokens = min(self._burst, self._tokens + (start - self._free_at) / self._seconds_per_byte)
            finish = start + max(0.0, -tokens) * self._seconds_per_byte
            self._tokens = max(0.0, tokens) - len(frame)
        else:
            finish = start + len(frame) * self._seconds_per_byte
        self._free_at = finish
        departures.append(finish)
        self.frames += 1
        self.bytes += len(frame)
        if self._loss and self._random() < self._loss:
            self.lost += 1
            return
        self._arrivals.add(finish + self._delay_s, self._deliver, frame)
