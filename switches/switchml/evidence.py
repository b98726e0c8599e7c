"""What a SwitchML switch's slots show of a job that missed its deadline (its record's
``waiting_evidence``, asked by the network at a deadline: network/evidence.py).

A slot that is waiting has the bitmap bit of every rank whose update arrived, so a rank
missing from every waiting slot is the one the others wait for (its traffic black-holed, its
link down, its process hung). Only on a switch that aggregates every rank of one job: the
spine of a hierarchical tree counts leaves, and jobs sharing a switch count ranks of their own.
"""

from __future__ import annotations

import logging
from typing import Sequence

from switches.control import SwitchControl
from switches.switchml.programming import BITMAP_REGISTER, COUNT_REGISTER

log = logging.getLogger(__name__)


def ranks_waited_for(bitmaps: Sequence[int], counts: Sequence[int], n_workers: int) -> list[int]:
    """The ranks missing from every waiting slot: a version with some ranks' updates, not all
    (0 < count < n; a complete version's bitmap loses bits as its ranks move on to the other
    shadow set, so its count, not its bitmap, says it is complete).

    Empty when no slot waits, or when the waiting slots miss different ranks (no one rank
    explains them all)."""
    full = (1 << n_workers) - 1
    waiting = [bitmap & full for bitmap, count in zip(bitmaps, counts) if 0 < count < n_workers]
    if not waiting:
        return []
    missing = full
    for bitmap in waiting:
        missing &= ~bitmap
    return [rank for rank in range(n_workers) if missing >> rank & 1]


def slots_evidence(control: SwitchControl, switch: str, n_workers: int) -> dict[int, str]:
    """Rank -> what the aggregating switch's slots show of it, for the ranks every waiting
    slot misses; empty where the switch cannot be read."""
    try:
        bitmaps, counts = control.register_read(BITMAP_REGISTER), control.register_read(COUNT_REGISTER)
    except Exception as exc:  # a dead switch: its death is the run's error, not this
        log.debug("reading %s's slots for evidence: %s", switch, exc)
        return {}
    assert isinstance(bitmaps, list) and isinstance(counts, list)
    ranks = ranks_waited_for(bitmaps, counts, n_workers)
    waiting = sum(1 for count in counts if 0 < count < n_workers)
    others = "every other rank's" if len(ranks) == 1 else f"every rank's but {', '.join(map(str, ranks))}"
    return {rank: f"{waiting} slot(s) of switch {switch} wait for its update and hold {others}" for rank in ranks}
