"""How a tensor maps onto packets and slots: the job plan a worker sends by and the analytic
models count by.

Packet p of a job goes to slot ``p mod n_slots``; the next packet on the same slot is
``p + n_slots``, sent when p's result arrives (the pool is self-clocked). A float32 job is
quantized with one-step lookahead: packet p carries the *data* of chunk ``p - n_slots``
(none for the first n_slots packets) and the *exponent* of chunk p, so the result of
packet p tells every worker e_max of chunk p just before the same slot sends that chunk's
data in packet p + n_slots. An int32 job has no exponent round: packet p carries chunk p.
"""

from __future__ import annotations

from dataclasses import dataclass


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
