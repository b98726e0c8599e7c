"""How a tensor maps onto packets and slots, and the per-slot state a worker keeps.

Packet p of a job goes to slot ``p mod n_slots``; the next packet on the same slot is
``p + n_slots``, sent when p's result arrives (the pool is self-clocked). A float32 job is
quantized with one-step lookahead: packet p carries the *data* of chunk ``p - n_slots``
(none for the first n_slots packets) and the *exponent* of chunk p, so the result of
packet p tells every worker e_max of chunk p just before the same slot sends that chunk's
data in packet p + n_slots. An int32 job has no exponent round: packet p carries chunk p.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from protocol.packet import payload_dtype


@dataclass(frozen=True)
class JobPlan:
    """Packets and slots of one all-reduce of ``length`` elements, ``k`` per packet."""

    length: int
    k: int
    n_chunks: int
    n_slots: int
    """Slots in use: the pool size, or fewer when the tensor has fewer chunks."""
    lead: int
    """Exponent-only packets before the first data: n_slots when quantized, else 0."""

    @classmethod
    def make(cls, length: int, k: int, pool_size: int, quantized: bool) -> "JobPlan":
        n_chunks = -(-length // k)
        n_slots = min(pool_size, n_chunks)
        return cls(length=length, k=k, n_chunks=n_chunks, n_slots=n_slots, lead=n_slots if quantized else 0)

    @property
    def total_packets(self) -> int:
        return self.n_chunks + self.lead


class SlotPool:
    """Outstanding packets and shadow-set positions of every slot, kept for the client's lifetime.

    ``packets[i]`` holds slot i's outstanding packet (a payload_dtype record) until the
    result arrives, so a retransmission resends the identical bytes. ``shadow_set[i]`` is
    the set slot i's next packet uses; it flips with every result and carries over to the
    next all-reduce, because the switch's per-set bitmaps outlive a job: the next job on a
    slot must continue with the other set, exactly as every other worker of the job does.
    """

    __slots__ = ("pool_size", "k", "packets", "shadow_set")

    def __init__(self, pool_size: int, k: int) -> None:
        self.pool_size = pool_size
        self.k = k
        self.packets = np.zeros(pool_size, dtype=payload_dtype(k))
        self.shadow_set = np.zeros(pool_size, dtype=np.uint8)

    def reset_shadow_sets(self) -> None:
        """Start every slot at set 0 again: only valid together with a reset of the switch's
        aggregation registers (programming.reset_aggregation_state)."""
        self.shadow_set[:] = 0
