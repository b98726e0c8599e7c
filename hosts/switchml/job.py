"""One all-reduce on the wire: the self-clocked send/receive loop of a SwitchML worker.

The loop owns nothing long-lived: the socket and the slot pool belong to the client, so
shadow sets and sequence numbers continue across jobs. The hot path allocates no per-packet
objects beyond what CPython needs for a call: it quantizes into preallocated numpy views
of the slot's send buffer, receives into one preallocated buffer and copies the result
elements straight from a big-endian view of it into the int32 sum.
"""

from __future__ import annotations

import logging
import math
import select
import socket
import time
from dataclasses import dataclass, field

import numpy as np

from hosts.stats import JobStats, SendTimeline
from hosts.switchml.pool import JobPlan, SlotPool
from hosts.switchml.timers import RetransmitPolicy, RoundTripEstimator, SlotTimers
from protocol import params
from protocol.packet import ELEMENT_DTYPE, EXPONENT_MAX, EXPONENT_MIN, SWITCHML_HEADER, SWITCHML_HEADER_BYTES
from protocol.quantize import quantize, scale_for

log = logging.getLogger(__name__)

SEQ_MASK = 0xFFFFFFFF
MISSING_SLOTS_SHOWN = 32
"""A timeout message lists at most this many slots (all are in SwitchMLTimeout.missing)."""


class SwitchMLTimeout(TimeoutError):
    """A job did not complete within its deadline; names the slots still waiting.

    ``missing`` maps slot -> (seq, shadow set) of the packet the slot is waiting for.
    After this error the switch's registers and the client's shadow sets disagree: reset
    both (programming.reset_aggregation_state and SwitchMLClient.reset_shadow_sets).
    """

    def __init__(self, job_id: int, rank: int, elapsed_s: float, missing: dict[int, tuple[int, int]]) -> None:
        self.job_id = job_id
        self.rank = rank
        self.elapsed_s = elapsed_s
        self.missing = missing
        shown = ", ".join(f"slot {s} (seq {q}, set {v})" for s, (q, v) in list(missing.items())[:MISSING_SLOTS_SHOWN])
        more = f" and {len(missing) - MISSING_SLOTS_SHOWN} more" if len(missing) > MISSING_SLOTS_SHOWN else ""
        super().__init__(
            f"SwitchML job {job_id} rank {rank}: no result after {elapsed_s:.3f} s for "
            f"{len(missing)} slot(s): {shown}{more}"
        )


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


@dataclass(frozen=True)
class JobContext:
    """Who is running the job and where its packets go: fixed for the client's lifetime."""

    rank: int
    n_workers: int
    job_id: int
    policy: RetransmitPolicy
    deadline_s: float
    rtt: RoundTripEstimator = field(default_factory=RoundTripEstimator)
    """The round-trip estimate, carried from one job of the client to the next."""


class AllReduceJob:
    """Sends ``tensor`` through the pool and collects the results; ``run`` does it once."""

    def __init__(
        self,
        sock: socket.socket,
        poller: select.poll,
        pool: SlotPool,
        ctx: JobContext,
        tensor: np.ndarray,
        block_exponents: np.ndarray | None,
        seq_base: int,
        t0: float,
    ) -> None:
        self._sock = sock
        self._poller = poller
        self._pool = pool
        self._ctx = ctx
        self._x = tensor
        self._quantized = block_exponents is not None
        self._plan = plan = JobPlan.make(len(tensor), pool.k, pool.pool_size, self._quantized)
        self._exponents: list[int] = block_exponents.tolist() if block_exponents is not None else []
        self._e_max = np.full(plan.n_chunks, EXPONENT_MIN, dtype=np.int8)
        self._work = np.empty(pool.k, dtype=np.float64)
        # scale_for of every int8 exponent, looked up per packet instead of recomputed
        self._scales: list[float] = scale_for(np.arange(EXPONENT_MIN, EXPONENT_MAX + 1), ctx.n_workers).tolist()
        self._seq_base = seq_base
        self._t0 = t0
        self.int_sum = np.zeros(plan.n_chunks * pool.k, dtype=np.int32)
        self._outstanding = [-1] * plan.n_slots  # packet index each slot waits for, -1 = done
        self._timers = SlotTimers(plan.n_slots, ctx.policy, ctx.rtt)
        self._timeline = SendTimeline(t0)
        self.stats = JobStats()

    @property
    def total_packets(self) -> int:
        return self._plan.total_packets

    @property
    def e_max(self) -> np.ndarray:
        return self._e_max

    # -- sending -------------------------------------------------------------------------

    def _fill(self, slot: int, p: int) -> None:
        """Write packet p (header + elements) into the slot's buffer."""
        plan, k = self._plan, self._pool.k
        data = self._pool.data[slot]
        chunk = p - plan.lead
        if chunk >= 0:
            lo = chunk * k
            m = min(k, plan.length - lo)
            if self._quantized:
                scale = self._scales[int(self._e_max[chunk]) - EXPONENT_MIN]
                quantize(self._x[lo : lo + m], scale, out=data[:m], work=self._work[:m])
            else:
                data[:m] = self._x[lo : lo + m]
            if m < k:
                data[m:] = 0
        else:
            data.fill(0)
        if self._quantized:
            exponent = self._exponents[p] if p < plan.n_chunks else EXPONENT_MIN
        else:
            exponent = 0
        SWITCHML_HEADER.pack_into(
            self._pool.buffers[slot],
            0,
            params.MSG_UPDATE,
            self._pool.shadow_set[slot],
            self._ctx.job_id,
            slot,
            k,
            exponent,
            (self._seq_base + p) & SEQ_MASK,
        )

    def _transmit(self, slot: int, p: int, now: float, resend: bool = False) -> None:
        """Send the slot's buffer and (re)arm its timer. A send the kernel refuses counts as a
        loss: the timer recovers it like any other."""
        buffer = self._pool.buffers[slot]
        try:
            self._sock.send(buffer)
        except (BlockingIOError, ConnectionRefusedError) as exc:
            log.debug("rank %d: send of slot %d seq %d failed: %s", self._ctx.rank, slot, p, exc)
        self.stats.packets_sent += 1
        self.stats.bytes_sent += len(buffer)
        self._timeline.record(now)
        self._outstanding[slot] = p
        self._timers.arm(slot, p, now, resend)

    def _fire_timers(self, now: float) -> None:
        while (expired := self._timers.pop_expired(now)) is not None:
            slot, p = expired
            self.stats.timeouts += 1
            self.stats.retransmissions += 1
            self._transmit(slot, p, now, resend=True)

    # -- receiving -----------------------------------------------------------------------

    def run(self) -> None:
        """Run the job to completion, or raise SwitchMLTimeout at the deadline."""
        plan, k = self._plan, self._pool.k
        now = time.perf_counter()
        for slot in range(plan.n_slots):
            self._fill(slot, slot)
            self._transmit(slot, slot, now)
        deadline = self._t0 + self._ctx.deadline_s
        recv_buf = bytearray(max(2048, 2 * len(self._pool.buffers[0])))
        recv_data = np.frombuffer(recv_buf, dtype=ELEMENT_DTYPE, count=k, offset=SWITCHML_HEADER_BYTES)
        expected_bytes = len(self._pool.buffers[0])
        unpack_from = SWITCHML_HEADER.unpack_from
        recv_into = self._sock.recv_into
        shadow_set, outstanding = self._pool.shadow_set, self._outstanding
        job_id, seq_base, stats = self._ctx.job_id, self._seq_base, self.stats
        remaining = plan.n_slots
        since_timer_check = 0
        while remaining:
            try:
                nbytes = recv_into(recv_buf)
            except BlockingIOError:
                now = time.perf_counter()
                since_timer_check = 0
                self._fire_timers(now)
                if now >= deadline:
                    raise self._timeout_error(now) from None
                next_deadline = self._timers.next_deadline()
                wake = deadline if next_deadline is None else min(next_deadline, deadline)
                self._poller.poll(max(0, math.ceil((wake - now) * 1000)))
                continue
            except ConnectionRefusedError:
                continue  # an ICMP error for an earlier send: that packet is lost, its timer resends
            now = time.perf_counter()
            stats.packets_received += 1
            stats.bytes_received += nbytes
            if nbytes == expected_bytes:
                msg_type, set_bit, rx_job, slot, num_elements, exponent, seq = unpack_from(recv_buf, 0)
                p = (seq - seq_base) & SEQ_MASK
                accepted = (
                    msg_type == params.MSG_RESULT
                    and rx_job == job_id
                    and num_elements == k
                    and slot < plan.n_slots
                    and outstanding[slot] == p
                    and shadow_set[slot] == set_bit
                )
            else:
                accepted = False
            if accepted:
                self._timers.answered(slot, now)
                if p < plan.n_chunks and self._quantized:
                    self._e_max[p] = exponent
                chunk = p - plan.lead
                if chunk >= 0:
                    self.int_sum[chunk * k : chunk * k + k] = recv_data
                shadow_set[slot] ^= 1
                following = p + plan.n_slots
                if following < plan.total_packets:
                    self._fill(slot, following)
                    self._transmit(slot, following, now)
                else:
                    outstanding[slot] = -1
                    self._timers.disarm(slot)
                    remaining -= 1
            else:
                stats.duplicates += 1
            # Timers fire when the socket is drained (above), not between queued results:
            # after the worker was descheduled, results already waiting in the socket
            # answer slots whose timers have expired, and firing first would resend them.
            # A worker that never drains (results arriving faster than it reads) still
            # checks every pool's worth of packets.
            since_timer_check += 1
            if since_timer_check >= plan.n_slots:
                since_timer_check = 0
                self._fire_timers(now)
            if now >= deadline and remaining:
                raise self._timeout_error(now)
        stats.timeline = self._timeline.bins

    def _timeout_error(self, now: float) -> SwitchMLTimeout:
        missing = {
            slot: ((self._seq_base + p) & SEQ_MASK, self._pool.shadow_set[slot])
            for slot, p in enumerate(self._outstanding)
            if p >= 0
        }
        return SwitchMLTimeout(self._ctx.job_id, self._ctx.rank, now - self._t0, missing)
