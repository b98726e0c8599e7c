"""One all-reduce on the wire: the self-clocked send/receive loop of a SwitchML worker.

The loop owns nothing long-lived: the socket, its batch buffers and the slot pool belong to
the client, so shadow sets and sequence numbers continue across jobs.

The loop works in batches. When the worker wakes up it takes every result waiting in the
socket at once (one recvmmsg), checks and files them with array operations, quantizes the
chunks those results make ready as one (B, k) block, and sends the B next packets with one
sendmmsg. The per-slot bookkeeping that stays in Python (timers, round-trip samples) is a
few attribute updates per packet. A lightly loaded worker sees batches of one and pays a
full call's overhead per packet; a busy one sees large batches, so its cost per packet
falls exactly when it matters. The packets on the wire are the same either way: which
packet a slot sends, its shadow set, seq, exponent and data depend only on the results,
not on how they were grouped.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import select
import time
from dataclasses import dataclass, field

import numpy as np

from hosts.stats import JobStats, SendTimeline
from hosts.switchml.mmsg import BatchSocket
from hosts.switchml.pool import SlotPool
from protocol.plan import JobPlan
from hosts.switchml.timers import RetransmitPolicy, RoundTripEstimator, SlotTimers
from protocol import params
from protocol.packet import EXPONENT_MAX, EXPONENT_MIN
from protocol.quantize import quantize, scale_for

log = logging.getLogger(__name__)

SEQ_MASK = 0xFFFFFFFF
MISSING_SLOTS_SHOWN = 32
"""A timeout message lists at most this many slots (all are in SwitchMLTimeout.missing)."""
HOLD_SHARE = 0.75
"""After sending, a worker whose batch was small waits this share of the results' queueing
delay before it receives again, so that results gather into batches instead of waking it
one by one. A wake-up costs about the same for one result as for thirty (a poll, a
receive, a send, ~70 array operations), and far more after a sleep than in a busy loop
(the caches are cold: ~500 us against ~150 us for a batch of 20, measured here), so fewer,
larger batches are what makes a worker cheap. Waiting costs no throughput while the link is
the bottleneck: the queueing part of a round trip is time the slots' packets sit in the
link's queue behind others, and holding for three quarters of it still leaves a quarter
of the pool queued. Where the pool is less than twice the bandwidth-delay product (long
links, small pools: results queue for less than the path's own round trip) the worker does
not wait: there the spread of the round trips is the hosts' scheduling, not a queue, and
holding would shorten the window the experiment set (measured: pool 32 on 10 ms links,
where the pool just covers the round trip, fell from 74 % to 68 % of the bound). Measured with 8 workers on the eBPF switch at 7.5 Mbit/s, quiet machine
(benchmarks/emulation_capacity.py): holding a quarter, a half and three quarters of the
queueing cost 48.5, 38.0 and 29.8 us of worker CPU per packet, left the machine 98 %, 80 %
and 67 % busy, and SwitchML reached 93.0, 92.0 and 94.8 % of its bound."""
HOLD_BELOW_SHARE = 0.9
"""Only batches smaller than this share of the pool make the worker hold. A worker whose
CPU is the bottleneck gets batches of a whole pool, and there its own queue would pass for
link queueing: holding would slow it further (measured: 8 workers on unshaped links took
twice as long with an unconditional hold). Nor does a worker hold in a job's last round
(fewer unsent packets than slots): there the results it waits for are the job's last, and
a hold would only add to a short job's TAT."""
HOLD_MAX_S = 0.010
"""The longest hold: one bin of the send timeline. (A hold is also below the median round
trip, so below half the retransmission timeout, which is twice that median.)"""


def hold_time(rtt: RoundTripEstimator) -> float:
    """How long a worker lets results gather before its next receive (HOLD_SHARE): none
    unless results queue for longer than the path's own round trip, i.e. unless the pool
    holds more than twice the bandwidth-delay product."""
    queueing, shortest = rtt.queueing, rtt.shortest
    if shortest is None or queueing <= shortest:
        return 0.0
    return min(HOLD_SHARE * queueing, HOLD_MAX_S)


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


def result_prefix(job_id: int, k: int) -> int:
    """switchml_h's first 8 bytes (msg_type .. num_elements) as a big-endian integer for a
    result of ``job_id`` with k elements, with the per-packet fields (set, slot) zero:
    compared under RESULT_PREFIX_MASK, it checks three fields of a whole batch in one step."""
    return (params.MSG_RESULT << 56) | (job_id << 32) | k


RESULT_PREFIX_MASK = 0xFF00_FFFF_0000_FFFF
"""msg_type, job_id and num_elements in switchml_h's first 8 bytes (result_prefix)."""


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
        io: BatchSocket,
        poller: select.poll,
        pool: SlotPool,
        ctx: JobContext,
        tensor: np.ndarray,
        block_exponents: np.ndarray | None,
        seq_base: int,
        t0: float,
    ) -> None:
        self._io = io
        self._refusals_before = io.refusals.copy()
        self._poller = poller
        self._pool = pool
        self._ctx = ctx
        self._quantized = block_exponents is not None
        self._plan = plan = JobPlan.make(len(tensor), pool.k, pool.pool_size, self._quantized)
        k = pool.k
        # The tensor as whole chunks (the last one zero-padded), so a batch of chunks is rows.
        self._chunks = np.zeros((plan.n_chunks, k), dtype=tensor.dtype)
        self._chunks.reshape(-1)[: len(tensor)] = tensor
        # The exponent field of every packet p: chunk p's block exponent while p < n_chunks
        # (the lookahead round), EXPONENT_MIN after; 0 throughout an int32 job.
        self._packet_exponents = np.full(plan.total_packets, EXPONENT_MIN if self._quantized else 0, dtype=np.int8)
        if block_exponents is not None:
            self._packet_exponents[: plan.n_chunks] = block_exponents
        self._e_max = np.full(plan.n_chunks, EXPONENT_MIN, dtype=np.int8)
        # scale_for of every int8 exponent, looked up per chunk instead of recomputed
        self._scales = scale_for(np.arange(EXPONENT_MIN, EXPONENT_MAX + 1), ctx.n_workers)
        self._seq_base = seq_base
        self._t0 = t0
        self.int_sum = np.zeros(plan.n_chunks * k, dtype=np.int32)
        self._sums = self.int_sum.reshape(plan.n_chunks, k)
        self._outstanding = np.full(plan.n_slots, -1, dtype=np.int64)  # packet each slot waits for, -1 = done
        self._timers = SlotTimers(plan.n_slots, ctx.policy, ctx.rtt)
        self._timeline = SendTimeline(t0)
        self.stats = JobStats()
        self._unsent = plan.total_packets
        """Packets not sent yet (retransmissions aside)."""
        # Field views of the batch buffers, made once: a batch then slices them.
        rx, tx = io.rx, io.tx
        self._rx_prefix = rx.view(np.dtype({"names": ["prefix"], "formats": [">u8"], "itemsize": rx.dtype.itemsize}))["prefix"]
        self._rx_slot, self._rx_set, self._rx_seq = rx["slot"], rx["shadow_set"], rx["seq"]
        self._rx_exponent, self._rx_data = rx["exponent"], rx["data"]
        self._expected_prefix = result_prefix(ctx.job_id, k)
        self._tx_set, self._tx_slot, self._tx_exponent, self._tx_seq, self._tx_data = (
            tx["shadow_set"], tx["slot"], tx["exponent"], tx["seq"], tx["data"])
        tx["msg_type"], tx["job_id"], tx["num_elements"] = params.MSG_UPDATE, ctx.job_id, k

    @property
    def total_packets(self) -> int:
        return self._plan.total_packets

    @property
    def e_max(self) -> np.ndarray:
        return self._e_max

    # -- sending -------------------------------------------------------------------------

    def _send_next(self, slots: np.ndarray, packets: np.ndarray, now: float) -> None:
        """Build packet ``packets[i]`` for slot ``slots[i]`` (all in one batch), keep each in
        its slot for retransmission, and send them."""
        count = len(slots)
        self._tx_set[:count] = self._pool.shadow_set[slots]
        self._tx_slot[:count] = slots
        self._tx_exponent[:count] = self._packet_exponents[packets]
        self._tx_seq[:count] = (self._seq_base + packets) & SEQ_MASK
        chunks = packets - self._plan.lead
        data = self._tx_data[:count]
        if chunks[0] >= 0 and chunks.min() >= 0:
            data[:] = self._chunk_data(chunks)
        else:  # the lookahead round: exponent-only packets carry zeros
            has_data = chunks >= 0
            data[:] = 0
            data[has_data] = self._chunk_data(chunks[has_data])
        self._pool.packets[slots] = self._io.tx[:count]
        self._transmit(count, now)
        self._outstanding[slots] = packets
        self._timers.arm(slots, packets, now)
        self._unsent -= count

    def _chunk_data(self, chunks: np.ndarray) -> np.ndarray:
        """The elements of these chunks as they go on the wire: quantized with each chunk's
        e_max (known from the lookahead round's results), or the int32 values as they are."""
        if not self._quantized:
            return self._chunks[chunks]
        scales = self._scales[self._e_max[chunks].astype(np.intp) - EXPONENT_MIN]
        return quantize(self._chunks[chunks], scales[:, np.newaxis])

    def _transmit(self, count: int, now: float, resent: int = 0) -> None:
        """Send ``tx[:count]``. A datagram the kernel refuses counts as a loss: its timer
        recovers it like any other."""
        refused = self._io.send(count)
        if refused:
            log.debug("rank %d: the kernel refused %d of %d packets", self._ctx.rank, refused, count)
        stats = self.stats
        stats.packets_sent += count
        stats.bytes_sent += count * self._io.tx.dtype.itemsize
        stats.retransmissions += resent
        self._timeline.record(now, count)

    def _fire_timers(self, now: float) -> None:
        """Resend, in one batch, every slot whose timer has expired."""
        slots, packets = self._timers.pop_expired(now)
        count = len(slots)
        if count:
            self._io.tx[:count] = self._pool.packets[slots]
            self.stats.timeouts += count
            self._transmit(count, now, resent=count)
            self._timers.arm(slots, packets, now, resend=True)

    # -- receiving -----------------------------------------------------------------------

    def _accept(self, count: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Of ``rx[:count]``: the indices of the results this job is waiting for (one per
        slot, the first if a result arrived twice), their slots and packet indices."""
        candidate = (self._rx_prefix[:count] & RESULT_PREFIX_MASK) == self._expected_prefix
        candidate &= self._io.lengths[:count] == self._io.rx.dtype.itemsize
        rx_slots = self._rx_slot[:count]
        candidate &= rx_slots < self._plan.n_slots
        index = np.flatnonzero(candidate)
        slots = rx_slots[index].astype(np.intp)
        packets = (self._rx_seq[:count][index].astype(np.int64) - self._seq_base) & SEQ_MASK
        waited = (self._outstanding[slots] == packets) & (self._pool.shadow_set[slots] == self._rx_set[:count][index])
        if not waited.all():
            index, slots, packets = index[waited], slots[waited], packets[waited]
        if len(slots) > 1 and np.bincount(slots).max() > 1:  # a result that arrived twice in one batch
            _, first = np.unique(slots, return_index=True)
            first.sort()
            index, slots, packets = index[first], slots[first], packets[first]
        return index, slots, packets

    def _file_results(self, index: np.ndarray, slots: np.ndarray, packets: np.ndarray) -> None:
        """Take the accepted results: e_max of lookahead chunks, sums of data chunks."""
        plan = self._plan
        if self._quantized and packets.min() < plan.n_chunks:
            lookahead = packets < plan.n_chunks
            self._e_max[packets[lookahead]] = self._rx_exponent[index[lookahead]]
        chunks = packets - plan.lead
        if chunks.min() >= 0:
            self._sums[chunks] = self._rx_data[index]
        else:
            data = chunks >= 0
            self._sums[chunks[data]] = self._rx_data[index[data]]
        self._pool.shadow_set[slots] ^= 1

    def run(self) -> None:
        """Run the job to completion, or raise SwitchMLTimeout at the deadline."""
        plan = self._plan
        now = time.perf_counter()
        first = np.arange(plan.n_slots)
        self._send_next(first, first.astype(np.int64), now)
        deadline = self._t0 + self._ctx.deadline_s
        stats, timers, io = self.stats, self._timers, self._io
        remaining = plan.n_slots
        since_timer_check = 0
        while remaining:
            count = io.receive()
            if count == 0:
                now = time.perf_counter()
                since_timer_check = 0
                self._fire_timers(now)
                if now >= deadline:
                    raise self._timeout_error(now)
                next_deadline = timers.next_deadline()
                wake = deadline if next_deadline is None else min(next_deadline, deadline)
                self._poller.poll(max(0, math.ceil((wake - now) * 1000)))
                continue
            now = time.perf_counter()
            stats.packets_received += count
            stats.bytes_received += int(io.lengths[:count].sum())
            index, slots, packets = self._accept(count)
            stats.duplicates += count - len(index)
            sending = False
            if len(index):
                self._file_results(index, slots, packets)
                timers.answered(slots, now)
                following = packets + plan.n_slots
                more = following < plan.total_packets
                if more.all():
                    self._send_next(slots, following, now)
                    sending = True
                else:
                    finished = slots[~more]
                    self._outstanding[finished] = -1
                    timers.disarm(finished)
                    remaining -= len(finished)
                    if more.any():
                        self._send_next(slots[more], following[more], now)
                        sending = True
            # Timers fire when the socket is drained (above), not between queued results:
            # after the worker was descheduled, results already waiting in the socket
            # answer slots whose timers have expired, and firing first would resend them.
            # A worker that never drains (results arriving faster than it reads) still
            # checks every pool's worth of packets.
            since_timer_check += count
            if since_timer_check >= plan.n_slots:
                since_timer_check = 0
                self._fire_timers(now)
            if now >= deadline and remaining:
                raise self._timeout_error(now)
            if sending and count < plan.n_slots * HOLD_BELOW_SHARE and self._unsent >= plan.n_slots and (hold := hold_time(self._timers.rtt)) > 0:
                time.sleep(hold)
        stats.timeline = self._timeline.bins

    def _timeout_error(self, now: float) -> SwitchMLTimeout:
        missing = {
            slot: ((self._seq_base + p) & SEQ_MASK, int(self._pool.shadow_set[slot]))
            for slot, p in enumerate(self._outstanding.tolist())
            if p >= 0
        }
        return SwitchMLTimeout(self._ctx.job_id, self._ctx.rank, now - self._t0, missing, dict(self._io.refusals - self._refusals_before))
