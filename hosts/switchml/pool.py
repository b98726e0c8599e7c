"""The per-slot state a worker keeps (how a tensor maps onto packets and slots is
protocol/switchml/plan.py's ``JobPlan``, which the analytic models share)."""

from __future__ import annotations

import numpy as np

from protocol.switchml.packet import payload_dtype


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
