"""The SwitchML worker's protocol, without I/O: packets and time in, packets and timers out.

``WorkerCore`` is one all-reduce of one worker as a state machine, the loop's policy
included. It never touches a socket or a clock: the caller hands it the time and the
results that arrived, and it writes the packets to send into a buffer of records the caller
owns and says how many, and when to call it again. ``start`` and ``step`` decide what a
turn does (file the results, or fire the expired timers when none arrived), the deadline,
and how the driver waits (for a result or the next timer, or holding while results
gather); the drivers only do the I/O they ask for: the emulated worker
(``hosts/switchml/job.py``: recvmmsg, sendmmsg, poll and the wall clock), the simulated
clock's (``simulation/switchml/worker.py``: links and SimPy events), and in C worker.c's socket loop
and simulation/switchml/native/star.c's event loop. The native data path (``hosts/switchml/native/``)
is this module translated to C, function for function, and differential tests hold the two
together (tests/test_native_step.py turn by turn, tests/test_native_worker.py and
tests/test_native_star.py whole jobs).

What every driver shares around a job is here too: the tensor as sent (``prepare_tensor``),
the result (``job_result``, ``AllReduceResult``) and the failures (``SwitchMLTimeout``,
``UnsummableTensor``).

The core works in batches. ``receive`` takes every result that arrived at once, checks
and files them with array operations, quantizes the chunks those results make ready as
one (B, k) block and writes the B next packets. Which packet a slot sends, its shadow set,
seq, exponent and data depend only on the results, not on how they were grouped.
"""

from __future__ import annotations

import errno
import math
import os
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from hosts.allreduce import Unsummable
from hosts.stats import TIMELINE_BIN_S, JobStats, SendTimeline
from hosts.switchml.pool import SlotPool
from hosts.switchml.timers import RetransmitPolicy, RoundTripEstimator, SlotTimers
from protocol.switchml import params
from protocol.packet import EXPONENT_MAX, EXPONENT_MIN
from protocol.switchml.plan import JobPlan
from protocol.quantize import UNSUMMABLE_EXPONENT, block_exponents, dequantize, element_scales, quantize, scale_for

SEQ_MASK = 0xFFFFFFFF
HOLD_SHARE = 0.75
"""After sending, a worker whose batch was small waits this share of the results' queueing
delay before it receives again, so that results gather into batches (a wake-up costs
about as much for one result as for thirty) while a quarter of the pool stays queued on
the link; why, and the measurements: benchmarks/README.md ("Why a worker holds")."""
HOLD_BELOW_SHARE = 0.9
"""Only batches smaller than this share of the pool make the worker hold. A worker whose
CPU is the bottleneck gets batches of a whole pool, and there its own queue would pass for
link queueing: holding would slow it further. Nor does a worker hold in a job's last round
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


def result_prefix(job_id: int, k: int) -> int:
    """switchml_h's first 8 bytes (msg_type .. num_elements) as a big-endian integer for a
    result of ``job_id`` with k elements, with the per-packet fields (set, slot) zero:
    compared under RESULT_PREFIX_MASK, it checks three fields of a whole batch in one step."""
    return (params.MSG_RESULT << 56) | (job_id << 32) | k


RESULT_PREFIX_MASK = 0xFF00_FFFF_0000_FFFF
"""msg_type, job_id and num_elements in switchml_h's first 8 bytes (result_prefix)."""


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


# -- what every driver shares: the batch, the tensor in, the result or the timeout out ----

BATCH_PER_POOL = 2
"""Datagrams one batch may hold, per slot: a whole pool of results plus as many
duplicates (retransmissions answered twice); what does not fit waits for the next batch."""
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


def prepare_tensor(tensor: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The tensor as the library sends it (1-D, contiguous) and its block exponents (None for
    int32): what every driver of WorkerCore starts a job from (SwitchMLClient, the simulator)."""
    x = np.ascontiguousarray(tensor)
    if x.ndim != 1:
        raise ValueError(f"allreduce takes a 1-D tensor, got shape {x.shape}")
    if x.dtype == np.float32:
        return lookahead_blocks(x, k)
    if x.dtype == np.int32:
        return x, None
    raise TypeError(f"allreduce aggregates float32 or int32 tensors, not {x.dtype}")


def lookahead_blocks(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``x`` as it is quantized, and its blocks' exponents for the lookahead round.

    A block the switch cannot sum (an inf, a NaN, |x| > 2^126) is sent as zeros with
    ``UNSUMMABLE_EXPONENT``, so every rank learns of it from the round's maximum and the job
    still completes on every rank (``job_result`` then raises ``UnsummableTensor``). The
    common tensor costs what ``block_exponents`` costs, and one look at its exponents."""
    try:
        exponents = block_exponents(x, k)
    except ValueError:  # an inf, a NaN or |x| >= 2^127 (check_quantizable)
        exponents = None
    if exponents is not None and not (exponents == UNSUMMABLE_EXPONENT).any():
        return x, exponents
    with np.errstate(invalid="ignore"):
        beyond = ~(np.abs(x) <= 2.0 ** (UNSUMMABLE_EXPONENT - 1))  # NaN is not <=
    unsummable = np.add.reduceat(beyond, np.arange(0, len(x), k)) > 0
    clean = x.copy()
    clean[np.repeat(unsummable, k)[: len(x)]] = 0
    exponents = block_exponents(clean, k)
    exponents[unsummable] = UNSUMMABLE_EXPONENT
    return clean, exponents


def job_result(int_sum: np.ndarray, e_max: np.ndarray, values: np.ndarray | None, quantized: bool, n_workers: int, k: int,
               length: int, stats: JobStats) -> AllReduceResult:
    """A finished job's result: the switch's int32 sums of the tensor's ``length`` elements,
    dequantized with the chunks' ``e_max`` when ``quantized`` (unless a loop dequantized as the
    results arrived: ``values``)."""
    int_sum = int_sum[:length]
    if not quantized:
        return AllReduceResult(values=int_sum, int_sum=int_sum, exponents=None, stats=stats)
    if (unsummable := np.flatnonzero(e_max == UNSUMMABLE_EXPONENT)).size:
        raise UnsummableTensor(unsummable, stats)
    if values is None:
        values = dequantize(int_sum, element_scales(e_max, n_workers, k, length))
    return AllReduceResult(values=values[:length], int_sum=int_sum, exponents=e_max, stats=stats)


# -- what a step tells its driver -------------------------------------------------------------

RUNNING, DONE, TIMED_OUT = 4, 0, 1
"""A step's ``status`` (worker.c's SML_RUNNING, SML_DONE, SML_TIMED_OUT): the job goes on, has
its last result, or has passed its deadline with slots still waiting."""


class Step(NamedTuple):
    """What the driver does after ``start`` or ``step``: send ``tx[:send]``; then, while the
    job is RUNNING, receive what has arrived at ``wake_at`` (at the latest) and call ``step``
    with it. With ``on_arrival`` a datagram that arrives earlier wakes the driver at once (it
    waits in poll); without, it lets the results gather until ``wake_at`` (a hold, or none:
    ``wake_at`` is then the step's ``now``, and the driver receives again at once)."""

    send: int
    wake_at: float
    on_arrival: bool
    status: int


def missing_slots(outstanding: np.ndarray, shadow_set: np.ndarray, seq_base: int) -> dict[int, tuple[int, int]]:
    """slot -> (seq, shadow set) of the packet each unanswered slot waits for (packet index
    ``outstanding[slot]``, -1 when the slot is done): what a timeout reports."""
    return {slot: ((seq_base + p) & SEQ_MASK, int(shadow_set[slot]))
            for slot, p in enumerate(outstanding.tolist()) if p >= 0}


MAX_JOB_PACKETS = 2**31 - 1
"""The most packets one all-reduce may have: worker.c numbers them in int32 (and the seq
field's 32 bits must tell every packet of a job apart). With k = 256 that is 5.5e11
elements; a larger tensor is refused, to be split into several all-reduces."""


def check_send_buffer(plan: JobPlan, pool: SlotPool, tx: np.ndarray) -> None:
    """Refuse a send buffer a job would write past: its records must be the pool's packets,
    and a batch may need two pools' worth (the next packets and the resends). worker.c writes
    into it unchecked, so both data paths check it here, before the job starts."""
    if tx.dtype != pool.packets.dtype:
        raise ValueError(f"the send buffer holds records of {tx.dtype.itemsize} bytes, the pool's packets "
                         f"({pool.k} elements) are {pool.packets.dtype.itemsize}")
    if len(tx) < 2 * plan.n_slots:
        raise ValueError(f"the send buffer holds {len(tx)} records, a batch may need {2 * plan.n_slots}")


@dataclass(frozen=True)
class JobArrays:
    """The arrays one all-reduce reads and fills, as both data paths lay them out (the
    native one hands them to worker.c as they are)."""

    plan: JobPlan
    quantized: bool
    chunks: np.ndarray
    """The tensor as whole chunks (the last one zero-padded), so a batch of chunks is rows:
    a view of the tensor when it is whole chunks (both cores only read it)."""
    packet_exponents: np.ndarray
    """The exponent field of every packet p: chunk p's block exponent while p < n_chunks (the
    lookahead round), EXPONENT_MIN after; 0 throughout an int32 job."""
    scales: np.ndarray
    """scale_for of every int8 exponent (index e - EXPONENT_MIN), looked up per chunk; zeros
    in an int32 job, which sends its values unscaled (and so needs no quantization code:
    lab 0's run, whose handout holds no lab 1 answer)."""
    e_max: np.ndarray
    """Per chunk, the exponent the lookahead round's result carried."""
    int_sum: np.ndarray
    """The switch's int32 sums, chunk after chunk."""
    outstanding: np.ndarray
    """The packet each slot waits for; -1 once the slot has its last result."""

    @classmethod
    def make(cls, tensor: np.ndarray, block_exponents: np.ndarray | None, pool: SlotPool, n_workers: int) -> JobArrays:
        quantized = block_exponents is not None
        plan = JobPlan.make(len(tensor), pool.k, pool.pool_size, quantized)
        if plan.total_packets > MAX_JOB_PACKETS:
            raise ValueError(f"a tensor of {len(tensor):,} elements takes {plan.total_packets:,} packets at k = {pool.k}, "
                             f"more than the {MAX_JOB_PACKETS:,} of one all-reduce (MAX_JOB_PACKETS): split it")
        if len(tensor) == plan.n_chunks * pool.k and tensor.flags.c_contiguous:
            chunks = tensor.reshape(plan.n_chunks, pool.k)  # whole chunks already: a view, never written
        else:
            chunks = np.zeros((plan.n_chunks, pool.k), dtype=tensor.dtype)
            chunks.reshape(-1)[: len(tensor)] = tensor
        packet_exponents = np.full(plan.total_packets, EXPONENT_MIN if quantized else 0, dtype=np.int8)
        if block_exponents is not None:
            packet_exponents[: plan.n_chunks] = block_exponents
        exponents = np.arange(EXPONENT_MIN, EXPONENT_MAX + 1)
        return cls(plan=plan, quantized=quantized, chunks=chunks, packet_exponents=packet_exponents,
                   scales=scale_for(exponents, n_workers) if quantized else np.zeros(len(exponents)),
                   e_max=np.full(plan.n_chunks, EXPONENT_MIN, dtype=np.int8),
                   int_sum=np.zeros(plan.n_chunks * pool.k, dtype=np.int32),
                   outstanding=np.full(plan.n_slots, -1, dtype=np.int64))


class WorkerCore:
    """One worker's all-reduce of ``tensor`` through the pool, as events.

    ``tx`` is the caller's buffer of outgoing records (payload_dtype(k), room for at least
    two pools). A driver calls ``start`` once and then ``step`` with every batch of
    datagrams it received (or none), and does what the returned ``Step`` says; each writes
    the packets to send to ``tx[:send]``. ``remaining`` is how many slots still wait for
    their last result. ``timeline_bin_s`` is the send timeline's bin (the simulated
    clock's jobs are short: hosts/stats.py).
    """

    def __init__(self, pool: SlotPool, ctx: JobContext, tensor: np.ndarray, block_exponents: np.ndarray | None,
                 seq_base: int, t0: float, tx: np.ndarray, timeline_bin_s: float = TIMELINE_BIN_S) -> None:
        self._pool = pool
        self._ctx = ctx
        arrays = JobArrays.make(tensor, block_exponents, pool, ctx.n_workers)
        self._quantized = arrays.quantized
        self.plan = plan = arrays.plan
        check_send_buffer(plan, pool, tx)
        self.chunks, self.packet_exponents, self.scales = arrays.chunks, arrays.packet_exponents, arrays.scales
        self.e_max, self.int_sum, self.outstanding = arrays.e_max, arrays.int_sum, arrays.outstanding
        self.seq_base = seq_base
        self.deadline = t0 + ctx.deadline_s
        """When the job times out (JobContext.deadline_s after ``t0``, the call)."""
        self._sums = self.int_sum.reshape(plan.n_chunks, pool.k)
        self._timers = SlotTimers(plan.n_slots, ctx.policy, ctx.rtt)
        self._timeline = SendTimeline(t0, timeline_bin_s)
        self.stats = JobStats(timeline_bin_s=timeline_bin_s)
        self.unsent = plan.total_packets
        """Packets not sent yet (retransmissions aside)."""
        self.remaining = plan.n_slots
        """Slots still waiting for their last result: the job is done at 0."""
        self._since_timer_check = 0
        self._answered = False
        """Whether the last ``receive`` sent next packets (only then may the worker hold)."""
        self._tx = tx
        self._record_bytes = tx.dtype.itemsize
        self._tx_set, self._tx_slot, self._tx_exponent, self._tx_seq, self._tx_data = (
            tx["shadow_set"], tx["slot"], tx["exponent"], tx["seq"], tx["data"])
        tx["msg_type"], tx["job_id"], tx["num_elements"] = params.MSG_UPDATE, ctx.job_id, pool.k
        self._expected_prefix = result_prefix(ctx.job_id, pool.k)
        self._prefix = np.dtype({"names": ["prefix"], "formats": [">u8"], "itemsize": tx.dtype.itemsize})
        """switchml_h's first 8 bytes of a record as one big-endian integer (result_prefix)."""

    @property
    def timeline(self) -> list[int]:
        return self._timeline.bins

    def hold_s(self, received: int) -> float:
        """How long to let results gather after ``receive`` took ``received`` datagrams
        (HOLD_SHARE, HOLD_BELOW_SHARE): 0 when the worker should receive again at once."""
        n_slots = self.plan.n_slots
        if not self._answered or received >= n_slots * HOLD_BELOW_SHARE or self.unsent < n_slots:
            return 0.0
        return hold_time(self._timers.rtt)

    def missing(self) -> dict[int, tuple[int, int]]:
        return missing_slots(self.outstanding, self._pool.shadow_set, self.seq_base)

    # -- the loop's policy ------------------------------------------------------------------

    def start(self, now: float) -> Step:
        """The first packet of every slot."""
        first = np.arange(self.plan.n_slots)
        return self._next_step(now, self._send_next(first, first.astype(np.int64), now, 0), 0)

    def step(self, now: float, rx: np.ndarray, lengths: np.ndarray) -> Step:
        """One turn of the loop at ``now``, with the datagrams received since the last one
        (``rx``; ``lengths`` their sizes as received; none when nothing was waiting). The
        timers fire only when nothing was: after the worker was descheduled, results already
        queued answer slots whose timers have expired, and firing first would resend them
        (``receive`` still checks the timers every pool's worth of datagrams, for a worker
        that never finds its socket empty)."""
        received = len(rx)
        count = self.receive(rx, lengths, now) if received else self.expire(now)
        return self._next_step(now, count, received)

    def _next_step(self, now: float, count: int, received: int) -> Step:
        """After writing ``count`` packets at ``now``: the job's end, its deadline (checked
        after every turn, so the packets of the last one still go out), a hold after a batch
        of ``received`` results (none: receive again at once), or, after a turn that found
        nothing, a wait for a result, the next timer or the deadline, whichever comes first."""
        if not self.remaining:
            return Step(count, math.inf, False, DONE)
        if now >= self.deadline:
            return Step(count, math.inf, False, TIMED_OUT)
        if received:
            return Step(count, now + self.hold_s(received), False, RUNNING)
        next_timer = self._timers.next_deadline()
        return Step(count, self.deadline if next_timer is None or next_timer > self.deadline else next_timer, True, RUNNING)

    # -- sending -------------------------------------------------------------------------

    def _send_next(self, slots: np.ndarray, packets: np.ndarray, now: float, at: int) -> int:
        """Build packet ``packets[i]`` for slot ``slots[i]`` into ``tx[at + i]``, keep each in
        its slot for retransmission, arm the slots' timers; returns ``at`` + their count."""
        count = len(slots)
        end = at + count
        self._tx_set[at:end] = self._pool.shadow_set[slots]
        self._tx_slot[at:end] = slots
        self._tx_exponent[at:end] = self.packet_exponents[packets]
        self._tx_seq[at:end] = (self.seq_base + packets) & SEQ_MASK
        chunks = packets - self.plan.lead
        data = self._tx_data[at:end]
        if chunks[0] >= 0 and chunks.min() >= 0:
            data[:] = self._chunk_data(chunks)
        else:  # the lookahead round: exponent-only packets carry zeros
            has_data = chunks >= 0
            data[:] = 0
            data[has_data] = self._chunk_data(chunks[has_data])
        self._pool.packets[slots] = self._tx[at:end]
        self._sent(count, now)
        self.outstanding[slots] = packets
        self._timers.arm(slots, packets, now)
        self.unsent -= count
        return end

    def _chunk_data(self, chunks: np.ndarray) -> np.ndarray:
        """The elements of these chunks as they go on the wire: quantized with each chunk's
        e_max (known from the lookahead round's results), or the int32 values as they are."""
        if not self._quantized:
            return self.chunks[chunks]
        scales = self.scales[self.e_max[chunks].astype(np.intp) - EXPONENT_MIN]
        return quantize(self.chunks[chunks], scales[:, np.newaxis])

    def _sent(self, count: int, now: float, resent: int = 0) -> None:
        stats = self.stats
        stats.packets_sent += count
        stats.bytes_sent += count * self._record_bytes
        stats.retransmissions += resent
        self._timeline.record(now, count)

    def expire(self, now: float, at: int = 0) -> int:
        """Resend, in one batch from ``tx[at]`` on, every slot whose timer has expired;
        returns ``at`` + their count. ``step`` calls it whenever the driver found nothing
        to receive; ``receive`` calls it every pool's worth of datagrams."""
        self._since_timer_check = 0
        slots, packets = self._timers.pop_expired(now)
        count = len(slots)
        if count:
            self._tx[at:at + count] = self._pool.packets[slots]
            self.stats.timeouts += count
            self._sent(count, now, resent=count)
            self._timers.arm(slots, packets, now, resend=True)
        return at + count

    # -- receiving -----------------------------------------------------------------------

    def receive(self, rx: np.ndarray, lengths: np.ndarray, now: float) -> int:
        """Take the datagrams ``rx`` (records, ``lengths`` their sizes as received): file the
        results this job waits for, count the rest as duplicates, write the next packets
        of the answered slots (and, every pool's worth of datagrams, the resends of expired
        slots) to ``tx``; returns how many."""
        count = len(rx)
        stats, plan = self.stats, self.plan
        stats.packets_received += count
        stats.bytes_received += int(lengths.sum())
        rejected = stats.rejected_results
        index, slots, packets = self._accept(rx, lengths)
        stats.duplicates += count - len(index) - (stats.rejected_results - rejected)
        sending = 0
        if len(index):
            self._file_results(rx, index, slots, packets)
            self._timers.answered(slots, now)
            following = packets + plan.n_slots
            more = following < plan.total_packets
            if more.all():
                sending = self._send_next(slots, following, now, 0)
            else:
                finished = slots[~more]
                self.outstanding[finished] = -1
                self._timers.disarm(finished)
                self.remaining -= len(finished)
                if more.any():
                    sending = self._send_next(slots[more], following[more], now, 0)
        # Timers are due when the socket is drained (step calls expire then: why there), but
        # a worker that never drains (results arriving faster than it reads) still checks
        # them every pool's worth of datagrams.
        self._answered = sending > 0
        self._since_timer_check += count
        if self._since_timer_check >= plan.n_slots:
            return self.expire(now, sending)
        return sending

    def _accept(self, rx: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Of ``rx``: the indices of the results this job is waiting for (one per slot, the
        first if a result arrived twice), their slots and packet indices.

        A result whose exponent is below the one this worker sent with the packet is refused
        and counted (``rejected_results``): the switch returns the largest of the workers'
        exponents, this one's included, and a smaller one would scale the next round's
        values past the int32 range (wrong sums on every worker). It is a loss: the timer
        resends. Packets after the lookahead round carry EXPONENT_MIN, so only it is checked."""
        prefix = rx.view(self._prefix)["prefix"]
        candidate = (prefix & RESULT_PREFIX_MASK) == self._expected_prefix
        candidate &= lengths == self._record_bytes
        rx_slots = rx["slot"]
        candidate &= rx_slots < self.plan.n_slots
        index = np.flatnonzero(candidate)
        slots = rx_slots[index].astype(np.intp)
        packets = (rx["seq"][index].astype(np.int64) - self.seq_base) & SEQ_MASK
        waited = (self.outstanding[slots] == packets) & (self._pool.shadow_set[slots] == rx["shadow_set"][index])
        if not waited.all():
            index, slots, packets = index[waited], slots[waited], packets[waited]
        if self._quantized and len(index):
            possible = rx["exponent"][index] >= self.packet_exponents[packets]
            if not possible.all():
                self.stats.rejected_results += int(len(index) - possible.sum())
                index, slots, packets = index[possible], slots[possible], packets[possible]
        if len(slots) > 1 and np.bincount(slots).max() > 1:  # a result that arrived twice in one batch
            _, first = np.unique(slots, return_index=True)
            first.sort()
            index, slots, packets = index[first], slots[first], packets[first]
        return index, slots, packets

    def _file_results(self, rx: np.ndarray, index: np.ndarray, slots: np.ndarray, packets: np.ndarray) -> None:
        """Take the accepted results: e_max of lookahead chunks, sums of data chunks."""
        plan = self.plan
        if self._quantized and packets.min() < plan.n_chunks:
            lookahead = packets < plan.n_chunks
            self.e_max[packets[lookahead]] = rx["exponent"][index[lookahead]]
        chunks = packets - plan.lead
        data = rx["data"]
        if chunks.min() >= 0:
            self._sums[chunks] = data[index]
        else:
            has_data = chunks >= 0
            self._sums[chunks[has_data]] = data[index[has_data]]
        self._pool.shadow_set[slots] ^= 1
