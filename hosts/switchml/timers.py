"""Per-slot retransmission timers: an adaptive timeout with exponential backoff.

SwitchML has no acknowledgements other than results, so each outstanding slot needs its
own timer: when it fires, the worker resends the identical packet. All timers live in one
heap ordered by deadline; re-arming or disarming a slot does not search the heap but only
changes the slot's current token, and entries whose token is no longer current are
skipped when they reach the top (lazy deletion). That keeps every operation O(log s)
without allocating per-slot timer objects.

The timeout adapts to the measured round trip, as TCP's does (Jacobson/Karels smoothing,
RFC 6298; samples only from packets sent once, Karn's rule). A fixed timeout cannot suit
every setting: a slot's round trip is the time the whole pool takes to drain through the
slowest worker's link (s * frame bits / link rate: 9 ms for 64 slots at 10 Mbit/s, 0.1 ms
at 10 Gbit/s) plus scheduling delays on CPU-shared emulation hosts. A timeout below that
resends packets that are only queued; each duplicate joins the same queue, lengthening
the round trip for every slot, and the job collapses into retransmissions. As in RFC
6298, the timeout before the first sample is generous (``first_s``: the first round trip
includes draining the whole pool), ``min_s`` is the floor, ``max_s`` the cap, and a slot's
backoff lasts until one of its packets, sent once, is answered: a resent packet yields no
sample, and resetting on its answer would pin a worker whose every packet was resent to
the floor forever.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

DEFAULT_MIN_TIMEOUT_S = 0.010
"""The reference's 10 ms, as the floor of the adaptive timeout. (A fixed 10 ms timeout,
measured with 8 workers, pool 32 and the embedded switch on 2 cores, caused ~3400
spurious retransmissions for 100k floats without any loss: the adaptive timeout is what
makes a low floor safe.)"""
DEFAULT_FIRST_TIMEOUT_S = 1.0
"""Before any round-trip sample: RFC 6298's initial RTO."""
DEFAULT_BACKOFF_EVERY = 1
"""Double on every timeout, as TCP does: each premature resend lengthens every slot's
queue, so the timeout must grow faster than the queue it causes (the reference's 100 is
for 100 Gbit/s, where a pool drains in microseconds)."""
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


class RoundTripEstimator:
    """Smoothed round trip and its variation (RFC 6298's SRTT and RTTVAR)."""

    __slots__ = ("srtt", "rttvar")

    def __init__(self) -> None:
        self.srtt: float | None = None
        self.rttvar = 0.0

    def sample(self, rtt: float) -> None:
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt

    def timeout(self, floor: float, first: float) -> float:
        """max(SRTT + 4 RTTVAR, 2 SRTT), never below ``floor``; ``first`` before any sample.

        The 2 SRTT term is RFC 793's rule (RTO = beta * SRTT, beta up to 2). A self-clocked
        pool makes round trips so regular that RTTVAR shrinks to a millisecond, and then
        every scheduling hiccup of a CPU-shared emulated host (tens of ms) resends a whole
        pool's worth of packets (measured: ~10k spurious resends per 8-worker job at
        5 Mbit/s with SRTT + 4 RTTVAR alone).
        """
        if self.srtt is None:
            return first
        return max(floor, self.srtt + 4 * self.rttvar, 2 * self.srtt)


class SlotTimers:
    """One timer per slot; ``token`` identifies what the slot is waiting for (a packet index)."""

    __slots__ = ("_policy", "_heap", "_armed", "_backoff", "_sent_at", "_resent", "rtt", "timeouts_per_slot")

    def __init__(self, n_slots: int, policy: RetransmitPolicy, rtt: RoundTripEstimator | None = None) -> None:
        self._policy = policy
        self._heap: list[tuple[float, int, int]] = []
        self._armed: list[int] = [-1] * n_slots
        self._backoff: list[float] = [1.0] * n_slots
        self._sent_at: list[float] = [0.0] * n_slots
        self._resent: list[bool] = [False] * n_slots
        self.rtt = RoundTripEstimator() if rtt is None else rtt
        """Shared across a client's jobs, so a job starts from the last one's estimate."""
        self.timeouts_per_slot: list[int] = [0] * n_slots

    def arm(self, slot: int, token: int, now: float, resend: bool = False) -> None:
        """(Re)start the slot's timer for ``token`` (a non-negative packet index).

        ``resend`` marks a retransmission: its result cannot tell which copy it answers,
        so it yields no round-trip sample (Karn's rule).
        """
        if not resend:
            self._sent_at[slot] = now
            self._resent[slot] = False
        else:
            self._resent[slot] = True
        self._armed[slot] = token
        policy = self._policy
        timeout = min(self.rtt.timeout(policy.min_s, policy.first_s) * self._backoff[slot], policy.max_s)
        heapq.heappush(self._heap, (now + timeout, slot, token))

    def answered(self, slot: int, now: float) -> None:
        """The slot's result arrived: if its packet was sent once, take a round-trip sample
        and end the slot's backoff (RFC 6298 keeps a backed-off RTO until a valid sample)."""
        if not self._resent[slot]:
            self.rtt.sample(now - self._sent_at[slot])
            self._backoff[slot] = 1.0

    def disarm(self, slot: int) -> None:
        self._armed[slot] = -1

    def next_deadline(self) -> float | None:
        """Earliest live deadline, or None when no slot is armed."""
        heap, armed = self._heap, self._armed
        while heap and armed[heap[0][1]] != heap[0][2]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def pop_expired(self, now: float) -> tuple[int, int] | None:
        """The next (slot, token) whose deadline is <= now, counting the timeout and backing
        off; the slot is left disarmed until the caller re-arms it after resending."""
        deadline = self.next_deadline()
        if deadline is None or deadline > now:
            return None
        _, slot, token = heapq.heappop(self._heap)
        self._armed[slot] = -1
        count = self.timeouts_per_slot[slot] + 1
        self.timeouts_per_slot[slot] = count
        if count % self._policy.backoff_every == 0:
            self._backoff[slot] *= 2.0
        return slot, token
