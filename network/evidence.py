"""What the network shows about a job that missed its deadline with no process stopped.

Every rank of a collective waits for the slowest, so the rank that reports the missed
deadline first is rarely the cause. Two things the network knows point at the cause:

- a host whose link is down: the switch's end of its veth has no carrier (``ip link set
  h3-eth0 down``), read in this machine's namespace;
- the aggregating switch's slots: a SwitchML slot that is waiting has the bitmap bit of
  every rank whose update arrived, so a rank missing from every waiting slot is the one
  the others wait for (its traffic black-holed, its link down, its process hung). Only on
  a switch that aggregates every rank of one job: the spine of a hierarchical tree counts
  leaves, and jobs sharing a switch count ranks of their own.

Both are read only when asked, at a deadline: the switch by one register read, which a
switch that died or stopped cannot answer (then there is no evidence, and the symptom stands).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Mapping, Sequence

from switches.control import SwitchControl
from switches.programming import BITMAP_REGISTER, COUNT_REGISTER

log = logging.getLogger(__name__)

SYSFS_NET = Path("/sys/class/net")


def carrier_lost(interface: str, sysfs: Path = SYSFS_NET) -> bool:
    """Whether ``interface`` (of this namespace) is up but has no carrier: its peer is down."""
    try:
        return (sysfs / interface / "carrier").read_text().strip() == "0"
    except OSError:  # an interface that is down itself has no readable carrier, or is gone
        return False


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


def aggregation_evidence(counters: Mapping[str, int], switch: str, n_workers: int, rounds: int) -> str | None:
    """What a switch's event counters show of a job whose sums came back wrong, or None when
    they show nothing amiss. Each of the job's ``rounds`` slot rounds (a worker's first
    transmissions) takes one update from every worker: the switch aggregates n - 1 of them
    (EV_UPDATE_CONSUMED) and multicasts the result with the last (EV_RESULT_MULTICAST); loss
    changes neither (a retransmission is ignored or answered by unicast). Other counts mean
    the switch's aggregation state changed under the job: its registers reset or written
    from outside it (bmv2's Thrift CLI, bpftool), or the switch restarted."""
    consumed, multicast = counters.get("EV_UPDATE_CONSUMED", 0), counters.get("EV_RESULT_MULTICAST", 0)
    if consumed == (n_workers - 1) * rounds and multicast == rounds:
        return None
    return (f"switch {switch} aggregated {consumed:,} updates and multicast {multicast:,} results for a job of {rounds:,} slot rounds "
            f"x {n_workers} workers, which takes {(n_workers - 1) * rounds:,} and {rounds:,}: its aggregation state changed under the "
            "job (its registers reset or written from outside it, as through its control-plane CLI, or the switch restarted)")
