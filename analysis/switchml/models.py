"""SwitchML's analytic models: its line-rate bound and pace (methods/switchml.py, its record's
``bound`` and ``pace``, under the names the labs and notebooks use) and the pool's window
(a slot's round trip, and the most a pool of slots allows), which labs 0 and 4 write.

The framing convention is analysis/models.py's: htb shapes Ethernet frame bytes, so a
frame costs ``protocol.switchml.packet.frame_bytes(k)`` bytes of link, no preamble or gap.
"""

from __future__ import annotations

from methods.method import BITS_PER_BYTE, require_positive
from methods.switchml import SwitchMLJobPace, line_rate_ate as switchml_line_rate_ate, switchml_job_pace
from protocol.switchml.packet import frame_bytes

__all__ = ["SwitchMLJobPace", "slot_round_trip_s", "switchml_job_pace", "switchml_line_rate_ate", "switchml_pool_bound_ate"]


def slot_round_trip_s(link_bps: float, k: int, link_delay_s: float) -> float:
    """Round trip of one slot on an idle star: from the moment a worker starts sending a
    slot's update until the slot's result has arrived, on links of ``link_bps`` with
    ``link_delay_s`` of delay each way.

    The switch's own processing time is left out (microseconds here, against milliseconds
    on the links at a few Mbit/s), as are queues: this is the round trip of the first slot,
    the shortest a pool can see, which is what sizes the pool.
    """
    require_positive(link_bps=link_bps, k=k)
    if link_delay_s < 0:
        raise ValueError(f"link_delay_s must be non-negative, got {link_delay_s}")
    # BEGIN LAB 4: the idle round trip of one slot: its update out to the switch and its result back
    # each way a frame of frame_bytes(k) bytes serialised at link_bps, then the link's delay
    return 2 * (frame_bytes(k) * BITS_PER_BYTE / link_bps + link_delay_s)
    # END LAB 4


def switchml_pool_bound_ate(link_bps: float, k: int, pool_size: int, round_trip_s: float) -> float:
    """Most aggregated elements/s a pool of ``pool_size`` slots of k elements allows, on
    links of ``link_bps`` where a slot's round trip is ``round_trip_s``.

    A worker has at most one update outstanding per slot and reuses a slot only when its
    result is back: the pool is a sliding window. Past the bandwidth-delay product of the
    links in frames more slots add nothing: the paper's argument that a little switch
    memory suffices.
    """
    require_positive(link_bps=link_bps, k=k, pool_size=pool_size, round_trip_s=round_trip_s)
    # BEGIN LAB 4: the most elements/s a window of pool_size slots allows on these links
    # pool_size * k elements per round trip (the window limit), never above the line rate
    return min(switchml_line_rate_ate(link_bps, k), pool_size * k / round_trip_s)
    # END LAB 4
