"""Per-slot retransmission timers: an adaptive timeout with a slow exponential backoff.

SwitchML has no acknowledgements other than results, so each outstanding slot needs its
own timer: when it fires, the worker resends the identical packet. The timers are arrays
indexed by slot (deadline, packet awaited, send time, ...), and every operation takes a
whole batch of slots at once, as the worker's loop handles its packets (hosts/switchml/job.py):
arming the 16 slots a batch of results answered is one array assignment, and finding the
expired ones is one comparison over the pool, which for pools of at most a few hundred
slots is cheaper in numpy than any per-slot structure in Python.

The timeout adapts to the measured round trip (twice the median of recent samples, taken
only from packets sent once: Karn's rule), because a slot's round trip is up to the time
the whole pool takes to drain through the slowest link, and a timeout below it resends
packets that are only queued until the job collapses into retransmissions; the testbed's
worker floors it at twice that drain time (``pool_drain_s``). The timeout before the first
sample is generous (``first_s``: the first round trip includes draining the whole pool),
``min_s`` is the floor, ``max_s`` the cap, and a slot's backoff (after ``backoff_every``
timeouts) lasts until one of its packets, sent once, is answered: a resent packet yields no
sample, and resetting on its answer would pin a worker whose every packet was resent to the
floor forever. Why these rules and not TCP's, with the measurements: benchmarks/README.md,
"The worker's retransmission timers".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from protocol.switchml.packet import frame_bytes
from protocol.switchml.params import DEFAULT_BACKOFF_EVERY

DEFAULT_MIN_TIMEOUT_S = 0.010
"""The reference's 10 ms, as the floor of the adaptive timeout, which is what makes so low
a floor safe (a fixed 10 ms was not: benchmarks/README.md, "The worker's retransmission timers")."""
DEFAULT_FIRST_TIMEOUT_S = 1.0
"""Before any round-trip sample: RFC 6298's initial RTO."""
DEFAULT_MAX_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class RetransmitPolicy:
    """Timeout of a slot: ``first_s`` until the first round-trip sample, then the adaptive
    round-trip timeout (never below ``min_s``), doubled after every ``backoff_every``
    timeouts of that slot until it is answered, never above ``max_s``."""

    min_s: float = DEFAULT_MIN_TIMEOUT_S
    backoff_every: int = DEFAULT_BACKOFF_EVERY
    max_s: float = DEFAULT_MAX_TIMEOUT_S
    first_s: float = DEFAULT_FIRST_TIMEOUT_S

    def __post_init__(self) -> None:
        if not 0 < self.min_s <= self.max_s:
            raise ValueError(f"need 0 < min_s <= max_s, got {self.min_s}, {self.max_s}")
        if not 0 < self.first_s <= self.max_s:
            raise ValueError(f"need 0 < first_s <= max_s, got {self.first_s}, {self.max_s}")
        if self.backoff_every < 1:
            raise ValueError(f"backoff_every must be >= 1, got {self.backoff_every}")

    @classmethod
    def fixed_at(cls, timeout_s: float) -> RetransmitPolicy:
        """One timeout whatever the round trips: for loss-free links, where a timeout only
        fires when the machine stalls (the labs before lab 3 run on it: lab 3 writes the
        adaptive timeout)."""
        return cls(min_s=timeout_s, max_s=timeout_s, first_s=timeout_s)

    @property
    def fixed(self) -> bool:
        """Floor, cap and first timeout alike: every timeout is ``max_s``, so there is no
        round trip to estimate and no backoff (it would be capped at ``max_s`` anyway)."""
        return self.min_s == self.max_s == self.first_s


def pool_drain_s(pool_size: int, k: int, link_bps: float) -> float:
    """How long a full pool of packets takes to cross a link of ``link_bps``: the round trip
    of a slot whose packet waits behind every other slot's."""
    # BEGIN LAB 3: seconds for pool_size frames of frame_bytes(k) to cross a link of link_bps
    return pool_size * frame_bytes(k) * 8 / link_bps
    # END LAB 3


class RoundTripEstimator:
    """The typical round trip of a slot: the median of the last ``window`` samples.

    Not RFC 6298's smoothed mean and deviation: under loss the samples are bimodal (a slot
    waits for the last worker's update, so a sample after another worker's loss holds that
    worker's timeout), the mean and deviation of such a mixture swing, and the median falls
    to the short samples, where the floor (``pool_drain_s``) takes over. The timeout is
    twice it, with no variance term (benchmarks/README.md, "The worker's retransmission timers").

    The samples live in a ring of ``window`` entries; the median is computed when asked
    for after new samples (once per batch of packets, not per sample).
    """

    __slots__ = ("_ring", "_count", "_median", "_shortest")

    WINDOW = 64
    """About one pool of samples: one round trip's worth of history."""

    def __init__(self, window: int = WINDOW) -> None:
        self._ring = np.zeros(window)
        self._count = 0
        self._median: float | None = None
        self._shortest = np.inf
        """The shortest round trip ever sampled: the path's own, with empty queues (every
        job starts with them, and the estimator outlives jobs)."""

    def sample(self, rtt: float | np.ndarray) -> None:
        """Add one round trip or an array of them (oldest first)."""
        samples = np.atleast_1d(rtt)
        self._shortest = min(self._shortest, float(samples.min()))
        ring, n = self._ring, len(samples)
        window = len(ring)
        if n > window:
            self._count += n - window
            samples, n = samples[-window:], window
        start = self._count % window
        head = min(n, window - start)  # up to the ring's end, the rest from its start
        ring[start : start + head] = samples[:head]
        ring[: n - head] = samples[head:]
        self._count += n
        self._median = None

    @property
    def median(self) -> float | None:
        """The median of the recent samples (the upper one of an even count), None before the first."""
        if self._median is None and self._count:
            recent = self._ring[: min(self._count, len(self._ring))]
            middle = len(recent) // 2
            self._median = float(np.partition(recent, middle)[middle])
        return self._median

    @property
    def queueing(self) -> float:
        """How much longer the typical round trip is than the shortest ever: the time a
        result spends queued behind others (0 before the first sample). Not the spread of
        the recent samples: a self-clocked pool that keeps a link busy queues every packet
        behind the same number of others, so its round trips are long and nearly equal."""
        median = self.median
        return 0.0 if median is None else median - self._shortest

    @property
    def shortest(self) -> float | None:
        """The shortest round trip ever sampled (None before the first)."""
        return None if self._count == 0 else self._shortest

    def timeout(self, floor: float, first: float) -> float:
        """Twice the median round trip, never below ``floor``; ``first`` before any sample."""
        # BEGIN LAB 3: first before any sample, else twice the median round trip, never below floor
        median = self.median
        return first if median is None else max(floor, 2 * median)
        # END LAB 3


class SlotTimers:
    """One timer per slot, as arrays; ``token`` identifies what a slot waits for (a packet index).

    Methods take ``slots`` as an int or an integer array, so a batch of slots costs one call.
    """

    __slots__ = ("_policy", "_deadline", "_token", "_backoff", "_sent_at", "_resent", "rtt", "timeouts_per_slot")

    def __init__(self, n_slots: int, policy: RetransmitPolicy, rtt: RoundTripEstimator | None = None) -> None:
        self._policy = policy
        self._deadline = np.full(n_slots, np.inf)
        """When each slot's timer fires; infinity while it is disarmed."""
        self._token = np.full(n_slots, -1, dtype=np.int64)
        self._backoff = np.ones(n_slots)
        self._sent_at = np.zeros(n_slots)
        self._resent = np.zeros(n_slots, dtype=bool)
        self.rtt = RoundTripEstimator() if rtt is None else rtt
        """Shared across a client's jobs, so a job starts from the last one's estimate."""
        self.timeouts_per_slot = np.zeros(n_slots, dtype=np.int64)

    def arm(self, slots: int | np.ndarray, tokens: int | np.ndarray, now: float, resend: bool = False) -> None:
        """(Re)start the slots' timers for ``tokens`` (non-negative packet indices).

        ``resend`` marks retransmissions: their results cannot tell which copy they answer,
        so they yield no round-trip sample (Karn's rule).
        """
        if not resend:
            self._sent_at[slots] = now
        self._resent[slots] = resend
        self._token[slots] = tokens
        policy = self._policy
        timeout = policy.max_s if policy.fixed else self.rtt.timeout(policy.min_s, policy.first_s)
        self._deadline[slots] = now + np.minimum(timeout * self._backoff[slots], policy.max_s)

    def answered(self, slots: int | np.ndarray, now: float) -> None:
        """The slots' results arrived: each packet sent once gives a round-trip sample and
        ends its slot's backoff (RFC 6298 keeps a backed-off RTO until a valid sample)."""
        slots = np.atleast_1d(slots)
        once = slots[~self._resent[slots]] if self._resent.any() else slots
        if len(once):
            self.rtt.sample(now - self._sent_at[once])
            self._backoff[once] = 1.0

    def disarm(self, slots: int | np.ndarray) -> None:
        self._deadline[slots] = np.inf
        self._token[slots] = -1

    def next_deadline(self) -> float | None:
        """Earliest deadline, or None when no slot is armed."""
        earliest = float(self._deadline.min()) if len(self._deadline) else np.inf
        return None if earliest == np.inf else earliest

    def pop_expired(self, now: float) -> tuple[np.ndarray, np.ndarray]:
        """The slots whose deadline is <= now and the tokens they wait for (both empty when
        none), counting a timeout of each and backing off every ``backoff_every``-th; the
        slots are left disarmed until the caller re-arms them after resending."""
        slots = np.flatnonzero(self._deadline <= now)
        tokens = self._token[slots]
        if len(slots):
            self.disarm(slots)
            self.timeouts_per_slot[slots] += 1
            if not self._policy.fixed:
                # BEGIN LAB 3: double the backoff factor of the slots whose timeout count is a multiple of backoff_every
                backing_off = slots[self.timeouts_per_slot[slots] % self._policy.backoff_every == 0]
                self._backoff[backing_off] *= 2.0
                # END LAB 3
        return slots, tokens
