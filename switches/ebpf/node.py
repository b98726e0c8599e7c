"""``EbpfSwitchNode``: the eBPF switch as a Mininet switch (switches/mininet_node.py).

It adds its links' rate and queue limit to the common node's options (ATP's phantom queues drain
at the one and hold at most the other). The switch has no process: its work runs in the
kernel's softirqs on whichever core received a frame, so ``switch_pid`` is None and the
switch's CPU shows up as the machine's softirq time (fidelity.csv), not as any process's.
``log_dir`` is accepted as every node's: the data plane writes no log (its counters are maps).
"""

from __future__ import annotations

from typing import Any

from switches.ebpf import TARGET
from switches.mininet_node import TargetSwitch


class EbpfSwitchNode(TargetSwitch):
    target = TARGET

    def data_plane_options(self) -> dict[str, Any]:
        """Its links' rate and queue limit, which a program that paces by them takes (``PACED_BY_LINK_RATE``)."""
        return {"port_rate_bps": self.port_rate_bps, "port_queue_packets": self.port_queue_packets}
