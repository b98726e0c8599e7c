"""One all-reduce on the wire: the emulated worker's driver around the protocol core.

``WorkerCore`` (hosts/switchml/core.py) is the protocol; this module gives it the wall
clock and the socket. The driver works in batches: when the worker wakes up it takes every
result waiting in the socket at once (one recvmmsg), hands them to the core, and sends
what the core wrote with one sendmmsg. A lightly loaded worker sees batches of one and
pays a full call's overhead per packet; a busy one sees large batches, so its cost per
packet falls exactly when it matters. What to do next is the core's (``WorkerCore.step``):
when the socket was empty it fires the expired timers, and the driver sleeps in poll until
the next timer, a result or the deadline; after a batch it may hold (``time.sleep``).

The driver owns nothing long-lived: the socket, its batch buffers and the slot pool belong
to the client, so shadow sets and sequence numbers continue across jobs.
"""

from __future__ import annotations

import logging
import math
import select
import time

import numpy as np

from hosts.stats import JobStats
from hosts.switchml.core import RUNNING, TIMED_OUT, JobContext, Step, SwitchMLTimeout, WorkerCore
from hosts.mmsg import BatchSocket, errno_counts
from hosts.switchml.pool import SlotPool

log = logging.getLogger(__name__)


class AllReduceJob:
    """Sends ``tensor`` through the pool and collects the results; ``run`` does it once."""

    def __init__(self, io: BatchSocket, poller: select.poll, pool: SlotPool, ctx: JobContext, tensor: np.ndarray,
                 block_exponents: np.ndarray | None, seq_base: int, t0: float) -> None:
        self._io = io
        self._refusals_before = io.refusals.copy()
        self._poller = poller
        self._ctx = ctx
        self._t0 = t0
        self.core = WorkerCore(pool, ctx, tensor, block_exponents, seq_base, t0, io.tx)

    @property
    def total_packets(self) -> int:
        return self.core.plan.total_packets

    @property
    def int_sum(self) -> np.ndarray:
        return self.core.int_sum

    @property
    def e_max(self) -> np.ndarray:
        return self.core.e_max

    @property
    def stats(self) -> JobStats:
        return self.core.stats

    values = None
    """The Python worker dequantizes once the job is done (the client does, with protocol.quantize)."""

    def _send(self, count: int) -> None:
        """Send ``tx[:count]``. A datagram the kernel refuses counts as a loss: its timer
        recovers it like any other."""
        if count and (refused := self._io.send(count)):
            log.debug("rank %d: the kernel refused %d of %d packets", self._ctx.rank, refused, count)

    def run(self) -> None:
        """Run the job to completion, or raise SwitchMLTimeout at the deadline: the core's
        steps, with the socket and the wall clock."""
        core, io = self.core, self._io
        now = time.perf_counter()
        step = core.start(now)
        while True:
            self._send(step.send)
            if step.status != RUNNING:
                break
            self._wait(step)
            count = io.receive()
            now = time.perf_counter()
            step = core.step(now, io.rx[:count], io.lengths[:count])
        if step.status == TIMED_OUT:
            raise self._timeout_error(now)
        core.stats.timeline = core.timeline
        core.stats.socket_errors = errno_counts(self._io.refusals - self._refusals_before)

    def _wait(self, step: Step) -> None:
        """Until ``step.wake_at``: in poll, which a datagram ends earlier (``on_arrival``),
        or asleep (a hold)."""
        wait = step.wake_at - time.perf_counter()
        if step.on_arrival:
            self._poller.poll(max(0, math.ceil(wait * 1000)))
        elif wait > 0:
            time.sleep(wait)

    def _timeout_error(self, now: float) -> SwitchMLTimeout:
        return SwitchMLTimeout(self._ctx.job_id, self._ctx.rank, now - self._t0, self.core.missing(),
                               dict(self._io.refusals - self._refusals_before))
