"""Per-slot retransmission timers: an adaptive timeout with a slow exponential backoff.

SwitchML has no acknowledgements other than results, so each outstanding slot needs its
own timer: when it fires, the worker resends the identical packet. All timers live in one
heap ordered by deadline; re-arming or disarming a slot does not search the heap but only
changes the slot's current token, and entries whose token is no longer current are
skipped when they reach the top (lazy deletion). That keeps every operation O(log s)
without allocating per-slot timer objects.

The timeout adapts to the measured round trip (twice the median of recent samples, taken
only from packets sent once: Karn's rule; see RoundTripEstimator for why not TCP's
smoothing). A fixed timeout cannot suit every setting: a slot's round trip is up to the
time the whole pool takes to drain through the slowest worker's link (s * frame bits /
link rate: 9 ms for 64 slots at 10 Mbit/s, 0.1 ms at 10 Gbit/s) plus scheduling delays on
CPU-shared emulation hosts. A timeout below that resends packets that are only queued;
each duplicate joins the same queue, lengthening the round trip for every slot, and the
job collapses into retransmissions. Under loss the measured round trips fall far below
it (the stalled pool leaves the queues empty) just before the recovering slots fill them
again, so the testbed's worker floors the timeout at twice the full-pool drain time
(``pool_drain_s``): measured with 8 workers at 2.5 Mbit/s and 5 % loss, without that
floor 167k packets were resent for two jobs of 1,088 packets per worker. The timeout
before the first sample is generous (``first_s``: the first round trip includes draining
the whole pool), ``min_s`` is the floor, ``max_s`` the cap, and a slot's backoff (after
``backoff_every`` timeouts) lasts until one of its packets, sent once, is answered: a
resent packet yields no sample, and resetting on its answer would pin a worker whose
every packet was resent to the floor forever.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from dataclasses import dataclass

from protocol.packet import frame_bytes

DEFAULT_MIN_TIMEOUT_S = 0.010
"""The reference's 10 ms, as the floor of the adaptive timeout. (A fixed 10 ms timeout,
measured with 8 workers, pool 32 and the embedded switch on 2 cores, caused ~3400
spurious retransmissions for 100k floats without any loss: the adaptive timeout is what
makes a low floor safe.)"""
DEFAULT_FIRST_TIMEOUT_S = 1.0
"""Before any round-trip sample: RFC 6298's initial RTO."""
DEFAULT_BACKOFF_EVERY = 100
"""Double only after many timeouts of a slot, as the reference implementation does (after
100 timeouts; its DPDK client's default is now 50,000). Most timeouts of a SwitchML worker are not its own losses: a
slot waits for the last worker's update, so one lost update times out every worker of the
job. Doubling on each timeout, TCP's rule, therefore backs off innocent workers, the next
lost update of that slot waits out the doubled timer, and the pool stalls (measured with 8
workers at 2.5 Mbit/s and 5 % loss: 6 % of the line-rate bound, against 31 % with 100).
Premature resends of queued packets, TCP's reason to back off, are what the pool-drain
floor (``pool_drain_s``) prevents."""
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


def pool_drain_s(pool_size: int, k: int, link_bps: float) -> float:
    """How long a full pool of packets takes to cross a link of ``link_bps``: the round trip
    of a slot whose packet waits behind every other slot's."""
    return pool_size * frame_bytes(k) * 8 / link_bps


class RoundTripEstimator:
    """The typical round trip of a slot: the median of the last ``window`` samples.

    Why not RFC 6298's smoothed mean and deviation: under loss a SwitchML worker's samples
    are bimodal. A slot is answered when the *last* worker's update arrives, so after
    another worker's update was lost the sample contains that worker's timeout (hundreds of
    ms); meanwhile the pool is mostly stalled, so the other samples are the round trip of
    an almost empty queue (1-5 ms). The mean and deviation of such a mixture swing with
    every few samples: measured with 8 workers at 2.5 Mbit/s and 5 % loss, SRTT + 4 RTTVAR
    wandered between 75 ms and 1.25 s within one job, and slots waited out those timers.
    The median ignores the rare long samples and, under loss, falls to the short ones, where
    the floor (``pool_drain_s``) takes over. The timeout is twice it (RFC 793's beta = 2):
    without loss a self-clocked pool's round trips are so regular that a variance term
    would vanish, and every scheduling hiccup of a CPU-shared emulated host (tens of ms)
    would then resend a whole pool of packets.
    """

    __slots__ = ("_window", "_recent", "_sorted")

    WINDOW = 64
    """About one pool of samples: one round trip's worth of history."""

    def __init__(self, window: int = WINDOW) -> None:
        self._window = window
        self._recent: deque[float] = deque()
        self._sorted: list[float] = []

    def sample(self, rtt: float) -> None:
        if len(self._recent) == self._window:
            del self._sorted[bisect.bisect_left(self._sorted, self._recent.popleft())]
        self._recent.append(rtt)
        bisect.insort(self._sorted, rtt)

    @property
    def median(self) -> float | None:
        """The median of the recent samples (the upper one of an even count), None before the first."""
        return self._sorted[len(self._sorted) // 2] if self._sorted else None

    def timeout(self, floor: float, first: float) -> float:
        """Twice the median round trip, never below ``floor``; ``first`` before any sample."""
        median = self.median
        return first if median is None else max(floor, 2 * median)


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
