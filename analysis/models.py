"""Analytic models the figures are drawn against, whatever the method: the baselines' bounds and
the speedups (SwitchML's own, its pace and pool window, are analysis/switchml/models.py's).

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
the runner reads too; a figure asks ``Method.bound``), as is the bus bandwidth; the
baselines' are imported here under the names the figures, labs and notebooks use, next to
the models that compose them (speedups).
"""

from __future__ import annotations

from methods.method import BITS_PER_BYTE, require_positive
from methods import ps, ring
from methods.ring import busbw

ring_traffic_per_tensor_byte = ring.traffic_per_tensor_byte
ring_algbw_bound = ring.BOUND.algbw
ring_ate_bound = ring.BOUND.ate
ps_traffic_per_tensor_byte = ps.traffic_per_tensor_byte
ps_algbw_bound = ps.BOUND.algbw
ps_ate_bound = ps.BOUND.ate

__all__ = [
    "BITS_PER_BYTE", "busbw", "expected_speedup_over_ring", "expected_training_speedup_over_ring", "ps_algbw_bound", "ps_ate_bound",
    "ps_traffic_per_tensor_byte", "ring_algbw_bound", "ring_ate_bound", "ring_traffic_per_tensor_byte", "time_dilation_factor",
    "training_speedup",
]  # fmt: skip


def expected_speedup_over_ring(n_workers: int) -> float:
    """Communication speedup of SwitchML over a ring when both run at line rate: 2(n-1)/n.

    SwitchML sends each tensor byte once per host, the ring 2(n-1)/n times, so at equal
    per-byte framing efficiency the ring needs 2(n-1)/n times longer (1.75x for n=8).
    SwitchML's own headers cost it a further factor 4k/frame_bytes(k) relative to raw
    payload, which its line-rate bound (analysis/switchml/models.py) accounts for and this ratio does not.
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
