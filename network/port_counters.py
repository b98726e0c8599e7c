"""What a switch's ports carried, from the kernel, to account for every frame a switch handled.

A software switch can lose frames where no P4 counter sees them: bmv2 under overload drops
input before its ingress pipeline (and output it has already counted), an AF_PACKET socket
overflows. The kernel counts what really crossed each switch port, so comparing its
counters with the pipeline's tells whether the switch kept up:

- input: frames the kernel delivered on the switch's ports (``rx_packets``) against the
  frames its ingress pipeline counted (every packet lands in exactly one ``EV_*`` cell);
- output: frames the pipeline counted as sent (``EGV_SENT``) against frames the ports
  transmitted (``tx_packets``), plus those the link's queue dropped (the qdisc: that is the
  emulated network's own loss, not the switch's) or still holds.

Frames between a port and the pipeline when the counters are read would look lost or
found, so the runner reads them once the job is over and the switch has drained.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Mapping, Sequence

TOLERANCE_FRAMES = 2
"""Frames in flight while the counters are read (one on each side) are not a loss."""
TOLERANCE_SHARE = 0.001
"""Nor is one frame in a thousand: stray control traffic read across the sampling edge."""


SETTLE_S = 0.2
"""How long a switch gets to drain its queues (and its delay line) after a job."""


@dataclass(frozen=True)
class PortCounters:
    rx_packets: int
    tx_packets: int
    queue_drops: int
    """Frames the interface's root qdisc (htb/pfifo: the link's queue) dropped so far..."""
    queued: int
    """...and holds now."""


def _statistic(interface: str, name: str) -> int:
    return int(Path(f"/sys/class/net/{interface}/statistics/{name}").read_text())


def root_qdisc(interface: str) -> tuple[int, int]:
    """(drops, queue length) of the interface's root qdisc; htb's include its pfifo's."""
    done = subprocess.run(["tc", "-s", "-j", "qdisc", "show", "dev", interface], capture_output=True, text=True, check=True)
    root = [q for q in json.loads(done.stdout or "[]") if q.get("root")]
    return sum(q.get("drops", 0) for q in root), sum(q.get("qlen", 0) for q in root)


def read_ports(interfaces: Sequence[str]) -> dict[str, PortCounters]:
    """Counters of root-namespace interfaces (the switches' ports) now."""
    return {i: PortCounters(_statistic(i, "rx_packets"), _statistic(i, "tx_packets"), *root_qdisc(i)) for i in interfaces}


def read_ports_script(interfaces: Sequence[str]) -> str:
    """A shell command that prints what ``read_ports`` reads, for a switch on another server
    (one round trip); ``parse_ports`` reads its output."""
    return "; ".join(f"echo {i} $(cat /sys/class/net/{i}/statistics/rx_packets /sys/class/net/{i}/statistics/tx_packets "
                     f"/sys/class/net/{i}/statistics/tx_bytes); tc -s -j qdisc show dev {i}; echo" for i in interfaces)


def parse_ports(output: str) -> tuple[dict[str, PortCounters], dict[str, int]]:
    """``read_ports_script``'s output: the counters, and each interface's transmitted bytes."""
    counters, tx_bytes = {}, {}
    lines = [line for line in output.splitlines() if line.strip()]
    for header, qdiscs in zip(lines[0::2], lines[1::2]):
        name, rx, tx, sent = header.split()
        root = [q for q in json.loads(qdiscs or "[]") if q.get("root")]
        counters[name] = PortCounters(int(rx), int(tx), sum(q.get("drops", 0) for q in root), sum(q.get("qlen", 0) for q in root))
        tx_bytes[name] = int(sent)
    return counters, tx_bytes


def frames_lost(lost: int, total: int) -> bool:
    return lost > max(TOLERANCE_FRAMES, TOLERANCE_SHARE * total)


INGRESS_EVENT_PREFIX = "EV_"
"""Every protocol's program counts each frame its ingress takes under exactly one event named
so; the notes its record names (``Aggregation.event_notes``) count besides."""


def account_switch(
    before: Mapping[str, PortCounters], after: Mapping[str, PortCounters], interfaces: Sequence[str], counters: Mapping[str, int],
    notes: Collection[str] = (),
) -> dict[str, int]:
    """One switch's frames over one job: what its ports and its pipeline saw, and the gaps;
    ``notes``: the ingress events its program counts besides a frame's own (not frames)."""
    rx = sum(after[i].rx_packets - before[i].rx_packets for i in interfaces)
    tx = sum(after[i].tx_packets - before[i].tx_packets for i in interfaces)
    queue_drops = sum(after[i].queue_drops - before[i].queue_drops for i in interfaces)
    queued = sum(after[i].queued - before[i].queued for i in interfaces)
    pipeline_in = sum(count for name, count in counters.items() if name.startswith(INGRESS_EVENT_PREFIX) and name not in notes)
    pipeline_out = counters["EGV_SENT"]
    return {
        "port_rx_frames": rx,
        "pipeline_in_frames": pipeline_in,
        "input_lost": rx - pipeline_in,
        "pipeline_out_frames": pipeline_out,
        "port_tx_frames": tx,
        "queue_drops": queue_drops,
        "output_lost": pipeline_out - tx - queue_drops - queued,
    }
