"""``Bmv2Control`` for ATP's program: the egress queues ECN is marked from (its program has
no drop simulator, so Bmv2Control resets its registers without closing the ingress).

ECN on bmv2 reads ``deq_qdepth``, the packets left in a port's egress queue. simple_switch
queues a port's packets only at a rate it is given (packets per second); without one a
packet is dequeued as soon as it is queued and the depth stays near 0. So the control plane
gives each port the rate its link drains at (``set_port_queue``), and the queue then
builds exactly where the link is the bottleneck.
"""

from __future__ import annotations

from switches.bmv2.control import Bmv2Control

ETHERNET_OVERHEAD_BYTES = 24
"""Preamble, start delimiter, FCS and inter-frame gap: what a frame costs a link beyond its bytes."""


def packets_per_second(link_bps: float, frame_bytes: int) -> int:
    """The rate a link of ``link_bps`` drains ``frame_bytes`` frames at (at least 1)."""
    return max(1, int(link_bps / (8 * (frame_bytes + ETHERNET_OVERHEAD_BYTES))))


class ATPBmv2Control(Bmv2Control):
    """Control plane of one simple_switch running p4/atp.p4."""

    def set_port_queue(self, port: int, rate_pps: int, depth_packets: int) -> None:
        """Port ``port``'s egress queue drains ``rate_pps`` packets per second and holds
        ``depth_packets`` (bmv2 drops beyond it, uncounted by the program)."""
        self._record("set_queue_rate", rate_pps, port)
        self._call("set_queue_rate", str(rate_pps), str(port))
        self._record("set_queue_depth", depth_packets, port)
        self._call("set_queue_depth", str(depth_packets), str(port))
