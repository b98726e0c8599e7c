"""What the network shows about a job that missed its deadline with no process stopped.

Every rank of a collective waits for the slowest, so the rank that reports the missed
deadline first is rarely the cause. Two things the network knows point at the cause:

- a host whose link is down: the switch's end of its veth has no carrier (``ip link set
  h3-eth0 down``), read in this machine's namespace;
- the aggregating switch's state, which its protocol reads (its record's ``waiting_evidence``:
  SwitchML's slots, switches/switchml/evidence.py).

Both are read only when asked, at a deadline: the switch by its protocol's register reads,
which a switch that died or stopped cannot answer (then there is no evidence, and the symptom stands).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

SYSFS_NET = Path("/sys/class/net")


def carrier_lost(interface: str, sysfs: Path = SYSFS_NET) -> bool:
    """Whether ``interface`` (of this namespace) is up but has no carrier: its peer is down."""
    try:
        return (sysfs / interface / "carrier").read_text().strip() == "0"
    except OSError:  # an interface that is down itself has no readable carrier, or is gone
        return False


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
