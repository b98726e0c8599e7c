"""The drop simulator's random draw, shared by ingress and egress, of every protocol's pipeline.

v1model's ``random(draw, 0, 0xFFFFFFFE)`` is uniform over 2^32 - 1 values and a packet is
dropped when ``draw < threshold``; switches/drop_simulator.py turns a probability p into
round(p * (2^32 - 1)), so p = 1 drops every packet and p = 0 none. A seeded generator
makes a run repeatable (``--seed``).
"""

from __future__ import annotations

import random

DRAW_VALUES = 0xFFFFFFFF
"""random(draw, 0, 0xFFFFFFFE) draws from this many values."""


class DropSimulator:
    def __init__(self, seed: int | None) -> None:
        self._randrange = random.Random(seed).randrange

    def drops(self, threshold: int) -> bool:
        """One draw against ``threshold``; threshold 0 never drops, so it skips the draw."""
        return threshold != 0 and self._randrange(DRAW_VALUES) < threshold
