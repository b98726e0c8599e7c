"""Analytic models the figures are drawn against.

Every bound here is a *bandwidth* bound: it assumes the only limit is the host link of
rate B (bit/s, full duplex, same rate in each direction) and asks how many bytes each host
must push through it per byte of tensor. Measured points can approach these lines but not
cross them; how close they get is the result.

Framing convention. The emulated links are shaped by htb, which meters *Ethernet frame
bytes* (no FCS, no preamble, no inter-frame gap). The SwitchML bound therefore divides by
``protocol.packet.frame_bytes(k)`` and deliberately does NOT add the 8-byte preamble and
12-byte IFG a physical 100 GbE port also spends: in emulation those bytes do not exist.
The ring and parameter-server bounds count payload bytes only (they are upper bounds: the
TCP/IP headers those baselines also carry can only lower them).

Each method's own link-rate bound is derived in its module of ``methods/`` (the registry
the runner reads too); they are imported here under the names the figures, labs and
notebooks use, next to the models that compose them (pace, pool window, speedups).
"""

from __future__ import annotations

from dataclasses import dataclass

from methods.method import BITS_PER_BYTE, require_positive
from methods import ps, ring
from methods.switchml import line_rate_ate as switchml_line_rate_ate
from protocol.plan import JobPlan
from protocol.packet import frame_bytes

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


@dataclass(frozen=True)
class SwitchMLJobPace:
    """The fastest one SwitchML all-reduce can go when only the network sets its pace.

    ``switchml_line_rate_ate`` is the steady-state ceiling; a whole job also spends time
    its data does not: a float32 job's lead round of exponent-only packets (one per slot,
    protocol/plan.py) and the last result's round trip. And a pool too small to fill
    the bandwidth-delay product caps the pace at the window instead of the line rate.
    """

    elements: int
    packets: int
    """Packets each worker sends: one per chunk, plus the lead round of a float32 job."""
    data_packets: int
    packet_interval_s: float
    """Time between a worker's packets in steady state: a frame's serialization, or the
    round trip over the slots in use when the window binds."""
    round_trip_s: float
    """A slot's round trip with empty queues: the update's and the result's serialization
    plus the link delay each way."""
    window_bound: bool
    """True when the slots in use do not cover the bandwidth-delay product."""

    @property
    def tat_s(self) -> float:
        """The last packet leaves (packets - 1) intervals after the first; its result returns
        one round trip later."""
        return (self.packets - 1) * self.packet_interval_s + self.round_trip_s

    @property
    def ate_per_s(self) -> float:
        return self.elements / self.tat_s

    @property
    def streaming_fraction(self) -> float:
        """Share of ``tat_s`` the data packets' own intervals take; the rest is start and
        drain (lead round, last round trip), which a short job is dominated by."""
        return self.data_packets * self.packet_interval_s / self.tat_s


def switchml_job_pace(elements: int, k: int, pool_size: int, link_bps: float, link_delay_s: float, quantized: bool) -> SwitchMLJobPace:
    """The network's pace for one job: ``elements`` all-reduced in chunks of ``k`` over a
    pool of ``pool_size`` slots, on links of ``link_bps`` with ``link_delay_s`` one way each.

    A worker's packets leave one serialization apart (``8 * frame_bytes(k) / B``) while the
    pool covers the round trip; otherwise each slot sends once per round trip, so the
    packets leave ``round_trip / slots`` apart. A result crosses the same links as the
    updates (each worker's own, the other way), so the downlinks carry as much and never
    bind first.
    """
    require_positive(elements=elements, k=k, pool_size=pool_size, link_bps=link_bps)
    if link_delay_s < 0:
        raise ValueError(f"link_delay_s must be non-negative, got {link_delay_s}")
    plan = JobPlan.make(elements, k, pool_size, quantized)
    serialization = BITS_PER_BYTE * frame_bytes(k) / link_bps
    round_trip = 2 * serialization + 2 * link_delay_s
    window_interval = round_trip / plan.n_slots
    return SwitchMLJobPace(
        elements=elements, packets=plan.total_packets, data_packets=plan.n_chunks,
        packet_interval_s=max(serialization, window_interval), round_trip_s=round_trip,
        window_bound=window_interval > serialization,
    )


def busbw(algbw_bytes_per_s: float, n_workers: int) -> float:
    """nccl-tests bus bandwidth: algbw * 2(n-1)/n.

    Scaling by the ring's traffic factor makes busbw comparable with the link rate for any
    n: a ring running at its bound has busbw = B/8.
    """
    return algbw_bytes_per_s * ring_traffic_per_tensor_byte(n_workers)


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
    """Training-iteration speedup of SwitchML over a baseline, without compute/comm overlap.

    One iteration = compute + gradient all-reduce, so its time is compute + comm and the
    speedup is ``(compute + comm_baseline) / (compute + comm_switchml)``. All three times
    must be on the same clock: in emulation ``compute_s`` is the real-hardware compute time
    multiplied by the time-dilation factor D (``time_dilation_factor``), because the
    measured communication is D times slower than on the reference links.
    Communication-bound models (compute small) approach comm_baseline / comm_switchml;
    compute-bound ones approach 1.
    """
    if min(compute_s, comm_baseline_s, comm_switchml_s) < 0:
        raise ValueError("times must be non-negative")
    require_positive(total_switchml_s=compute_s + comm_switchml_s)
    # BEGIN LAB 5: iteration time (compute + all-reduce) with the baseline over that with SwitchML
    return (compute_s + comm_baseline_s) / (compute_s + comm_switchml_s)
    # END LAB 5


def expected_training_speedup_over_ring(compute_s: float, comm_ring_s: float, n_workers: int) -> float:
    """Training speedup over a ring if SwitchML were exactly 2(n-1)/n times faster at communicating.

    Plugs ``comm_switchml = comm_ring / expected_speedup_over_ring(n)`` into
    ``training_speedup``: the expectation a measured bar is compared with.
    """
    # BEGIN LAB 5: training_speedup with SwitchML's all-reduce 2(n-1)/n times shorter than the ring's
    return training_speedup(compute_s, comm_ring_s, comm_ring_s / expected_speedup_over_ring(n_workers))
    # END LAB 5


def slot_round_trip_s(link_bps: float, k: int, link_delay_s: float) -> float:
    """Round trip of one slot on an idle star: the update crosses the worker's link (one
    frame's serialisation plus the link's delay), then the result comes back the same way.

    The switch's own processing time is left out (microseconds here, against milliseconds of
    serialisation at a few Mbit/s), as are queues: this is the round trip of the first slot,
    the shortest a pool can see.
    """
    require_positive(link_bps=link_bps, k=k)
    if link_delay_s < 0:
        raise ValueError(f"link_delay_s must be non-negative, got {link_delay_s}")
    # BEGIN LAB 4: two frame_bytes(k) serialisations at link_bps plus the link delay each way
    return 2 * (frame_bytes(k) * BITS_PER_BYTE / link_bps + link_delay_s)
    # END LAB 4


def switchml_pool_bound_ate(link_bps: float, k: int, pool_size: int, round_trip_s: float) -> float:
    """Most aggregated elements/s a pool of ``pool_size`` slots allows: the smaller of the
    line-rate bound and one pool of k-element packets per round trip.

    A worker has at most ``pool_size`` updates outstanding, and a slot is reused only when
    its result is back, so it sends at most ``pool_size * k`` elements per round trip
    (the window limit of any sliding-window protocol). The pool covers the link when
    ``pool_size`` is at least the bandwidth-delay product in frames; beyond that the line
    rate is the limit and more slots add nothing: the paper's argument that a little
    switch memory suffices.
    """
    require_positive(link_bps=link_bps, k=k, pool_size=pool_size, round_trip_s=round_trip_s)
    # BEGIN LAB 4: the window limit pool_size * k per round trip, capped by switchml_line_rate_ate
    return min(switchml_line_rate_ate(link_bps, k), pool_size * k / round_trip_s)
    # END LAB 4
