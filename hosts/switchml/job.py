"""One all-reduce on the wire: the emulated worker's driver around the protocol core.

``WorkerCore`` (hosts/switchml/core.py) is the protocol; this module gives it the wall
clock and the socket. The driver works in batches: when the worker wakes up it takes every
result waiting in the socket at once (one recvmmsg), hands them to the core, and sends
what the core wrote with one sendmmsg. A lightly loaded worker sees batches of one and
pays a full call's overhead per packet; a busy one sees large batches, so its cost per
packet falls exactly when it matters. When the socket is empty the driver fires the
expired timers and sleeps in poll until the next timer, a result or the deadline.

The driver owns nothing long-lived: the socket, its batch buffers and the slot pool belong
to the client, so shadow sets and sequence numbers continue across jobs.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import select
import time
from dataclasses import dataclass

import numpy as np

from hosts.allreduce import Unsummable
from hosts.stats import JobStats
from hosts.switchml.core import JobContext, WorkerCore
from hosts.switchml.mmsg import BatchSocket, errno_counts
from hosts.switchml.pool import SlotPool

log = logging.getLogger(__name__)

MISSING_SLOTS_SHOWN = 32
"""A timeout message lists at most this many slots (all are in SwitchMLTimeout.missing)."""


class SwitchMLTimeout(TimeoutError):
    """A job did not complete within its deadline; names the slots still waiting.

    ``missing`` maps slot -> (seq, shadow set) of the packet the slot is waiting for.
    After this error the switch's registers and the client's shadow sets disagree: reset
    both (programming.reset_aggregation_state and SwitchMLClient.reset_shadow_sets).
    """

    def __init__(self, job_id: int, rank: int, elapsed_s: float, missing: dict[int, tuple[int, int]],
                 refusals: dict[int, int] | None = None) -> None:
        self.job_id = job_id
        self.rank = rank
        self.elapsed_s = elapsed_s
        self.missing = missing
        self.refusals = dict(refusals or {})
        """errno -> datagrams the kernel refused or reported lost with it (BatchSocket.refusals)."""
        shown = ", ".join(f"slot {s} (seq {q}, set {v})" for s, (q, v) in list(missing.items())[:MISSING_SLOTS_SHOWN])
        more = f" and {len(missing) - MISSING_SLOTS_SHOWN} more" if len(missing) > MISSING_SLOTS_SHOWN else ""
        refused = "".join(f"; the kernel refused {n:,} of its datagrams with {errno.errorcode.get(code, code)} ({os.strerror(code)})"
                          for code, n in sorted(self.refusals.items()))
        super().__init__(
            f"SwitchML job {job_id} rank {rank}: no result after {elapsed_s:.3f} s for "
            f"{len(missing)} slot(s): {shown}{more}{refused}"
        )


class UnsummableTensor(Unsummable):
    """A float32 all-reduce whose lookahead round carried ``UNSUMMABLE_EXPONENT``
    (protocol/quantize.py) for some blocks: a rank's block held an inf, a NaN or an element
    beyond 2^126, which block floating point cannot carry. Every rank of the job raises it at
    the same call, after a complete job (the switch's registers and the shadow sets stay in
    step), so all take the same other route (hosts/torch_backend.py: Gloo's IEEE sum).

    ``blocks`` are the chunks whose exponent said so; ``stats`` the job's statistics."""

    def __init__(self, blocks: np.ndarray, stats: JobStats) -> None:
        super().__init__(blocks, stats)  # its args rebuild it (SimPy rebuilds what escapes a process from them)
        self.blocks = blocks
        self.stats = stats

    def __str__(self) -> str:
        blocks = self.blocks
        shown = ", ".join(map(str, blocks[:8].tolist())) + (f" and {len(blocks) - 8} more" if len(blocks) > 8 else "")
        return (f"the switch cannot sum block(s) {shown}: a rank's block held an inf, a NaN or |x| > 2^126, "
                "beyond block floating point's int8 exponent")


@dataclass
class AllReduceResult:
    """The aggregated tensor and what it took.

    ``int_sum`` is the raw int32 sum from the switch (for bit-exact verification against
    protocol.quantize.expected_sum); ``values`` is float32 (dequantized) or int32 (equal to
    int_sum); ``exponents`` is e_max per chunk for float32 jobs, None for int32.
    """

    values: np.ndarray
    int_sum: np.ndarray
    exponents: np.ndarray | None
    stats: JobStats


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
        """Run the job to completion, or raise SwitchMLTimeout at the deadline."""
        core, io = self.core, self._io
        self._send(core.start(time.perf_counter()))
        deadline = self._t0 + self._ctx.deadline_s
        while core.remaining:
            count = io.receive()
            if count == 0:
                now = time.perf_counter()
                self._send(core.expire(now))
                if now >= deadline:
                    raise self._timeout_error(now)
                next_timer = core.next_timer()
                wake = deadline if next_timer is None else min(next_timer, deadline)
                self._poller.poll(max(0, math.ceil((wake - now) * 1000)))
                continue
            now = time.perf_counter()
            self._send(core.receive(io.rx[:count], io.lengths[:count], now))
            if now >= deadline and core.remaining:
                raise self._timeout_error(now)
            if (hold := core.hold_s(count)) > 0:
                time.sleep(hold)
        core.stats.timeline = core.timeline
        core.stats.socket_errors = errno_counts(self._io.refusals - self._refusals_before)

    def _timeout_error(self, now: float) -> SwitchMLTimeout:
        return SwitchMLTimeout(self._ctx.job_id, self._ctx.rank, now - self._t0, self.core.missing(),
                               dict(self._io.refusals - self._refusals_before))
