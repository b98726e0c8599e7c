"""Analytic models the figures are drawn against.

Every bound here is a *bandwidth* bound: it assumes the only limit is the host link of
rate B (bit/s, full duplex, same rate in each direction) and asks how many bytes each host
must push through it per byte of tensor. Measured points can approach these lines but not
cross them; how close they get is the result.

Framing convention. The emulated links are shaped by htb, which meters *Ethernet frame
bytes* (no FCS, no preamble, no inter-frame gap). The SwitchML bound therefore divides by
``protocol.switchml.packet.frame_bytes(k)`` and deliberately does NOT add the 8-byte preamble and
12-byte IFG a physical 100 GbE port also spends: in emulation those bytes do not exist.
The ring and parameter-server bounds count payload bytes only (they are upper bounds: the
TCP/IP headers those baselines also carry can only lower them).

Each method's own link-rate bound is derived in its module of ``methods/`` (the registry
the runner reads too), as is SwitchML's pace model (its record's ``pace``) and the bus
bandwidth; they are imported here under the names the figures, labs and notebooks use,
next to the models that compose them (pool window, speedups).
"""

from __future__ import annotations

from methods.method import BITS_PER_BYTE, require_positive
from methods import ps, ring
from methods.ring import busbw
from methods.switchml import SwitchMLJobPace, line_rate_ate as switchml_line_rate_ate, switchml_job_pace
from protocol.switchml.packet import frame_bytes

ring_traffic_per_tensor_byte = ring.traffic_per_tensor_byte
ring_algbw_bound = ring.BOUND.algbw
ring_ate_bound = ring.BOUND.ate
ps_traffic_per_tensor_byte = ps.traffic_per_tensor_byte
ps_algbw_bound = ps.BOUND.algbw
ps_ate_bound = ps.BOUND.ate

__all__ = [
    "BITS_PER_BYTE", "SwitchMLJobPace", "busbw", "expected_speedup_over_ring",
    "expected_training_speedup_over_ring", "ps_algbw_bound", "ps_ate_bound", "ps_traffic_per_tensor_byte",
    "ring_algbw_bound", "ring_ate_bound", "ring_traffic_per_tensor_byte", "slot_round_trip_s", "switchml_job_pace",
    "switchml_line_rate_ate", "switchml_pool_bound_ate", "time_dilation_factor", "training_speedup",
]  # fmt: skip


def expected_speedup_over_ring(n_workers: int) -> float:
    """Communication speedup of SwitchML over a ring when both run at line rate: 2(n-1)/n.

    SwitchML sends each tensor byte once per host, the ring 2(n-1)/n times, so at equal
    per-byte framing efficiency the ring needs 2(n-1)/n times longer (1.75x for n=8).
    SwitchML's own headers cost it a further factor 4k/frame_bytes(k) relative to raw
    payload, which ``switchml_line_rate_ate`` accounts for and this ratio does not.
    """
    return ring_traffic_per_tensor_byte(n_workers)


def time_dilation_factor(reference_link_bps: float, emulated_link_bps: float) -> float:
    """How many times slower the emulated links are than the hardware being reproduced.

    Communication in emulation takes about this many times longer than on the reference
    links, so compute times measured on real hardware must be multiplied by the same factor
    (the runner does this with the config's ``workload.time_dilation``) to keep the
    compute : communication ratio, and thus the training speedup, faithful.
    """
    require_positive(reference_link_bps=reference_link_bps, emulated_link_bps=emulated_link_bps)
    return reference_link_bps / emulated_link_bps


def training_speedup(compute_s: float, comm_baseline_s: float, comm_switchml_s: float) -> float:
    """Training-iteration speedup of SwitchML over a baseline: how many times faster one
    iteration of data-parallel training runs with SwitchML's gradient all-reduce than with
    the baseline's, when compute and communication do not overlap.

    ``compute_s`` is an iteration's compute, ``comm_*_s`` each method's all-reduce of its
    gradients. All three times must be on the same clock: in emulation ``compute_s`` is the
    real-hardware compute time multiplied by the time-dilation factor D
    (``time_dilation_factor``), because the measured communication is D times slower than
    on the reference links.
    """
    if min(compute_s, comm_baseline_s, comm_switchml_s) < 0:
        raise ValueError("times must be non-negative")
    require_positive(total_switchml_s=compute_s + comm_switchml_s)
    # BEGIN LAB 5: how many times faster one iteration (no overlap of compute and all-reduce) is with SwitchML
    # an iteration is compute then all-reduce: (compute + comm_baseline) / (compute + comm_switchml)
    return (compute_s + comm_baseline_s) / (compute_s + comm_switchml_s)
    # END LAB 5


def expected_training_speedup_over_ring(compute_s: float, comm_ring_s: float, n_workers: int) -> float:
    """Training speedup over a ring if SwitchML's all-reduce were exactly as much faster than
    the ring's as the bandwidth argument says (``expected_speedup_over_ring``, for
    ``n_workers``): the expectation a measured bar is compared with.
    """
    # BEGIN LAB 5: the training speedup if SwitchML's all-reduce were expected_speedup_over_ring(n_workers) times the ring's speed
    # SwitchML's all-reduce time is the ring's divided by expected_speedup_over_ring(n_workers)
    return training_speedup(compute_s, comm_ring_s, comm_ring_s / expected_speedup_over_ring(n_workers))
    # END LAB 5


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
