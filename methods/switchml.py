"""SwitchML: every worker sends each k-element chunk once to the switch, which sums the
chunks of all workers in its registers and multicasts the result (hosts/switchml/).

Its bound is the line rate of its frames: htb shapes Ethernet frame bytes, so preamble and
inter-frame gap are not counted (analysis/models.py, "Framing convention").
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Any, Mapping

from methods import verification
from methods.aggregation import Aggregation, PoolSharing
from methods.method import BITS_PER_BYTE, in_network, require_positive
from protocol.packet import ELEMENT_BYTES
from protocol.switchml.packet import frame_bytes
from protocol.switchml.params import DEFAULT_BACKOFF_EVERY, DEFAULT_K, DEFAULT_POOL_SIZE, INGRESS_NOTES, K_CHOICES, MAX_POOL_SIZE
from protocol.switchml.plan import JobPlan
from protocol.quantize import PROTOCOL_BITS
from protocol.worker_spec import SwitchMLParameters


def line_rate_ate(link_bps: float, k: int) -> float:
    """Most aggregated tensor elements per second SwitchML can reach on links of ``link_bps``
    bit/s, with k elements per packet.

    Each worker sends every chunk of k elements exactly once, in one frame of
    ``frame_bytes(k)`` bytes, and receives each result once, in a frame of the same size on
    the other direction of its full-duplex link: the link's rate in frames, not the number
    of workers, is what limits it. Preamble and IFG are not counted (htb shapes frame bytes).
    """
    require_positive(link_bps=link_bps, k=k)
    # BEGIN LAB 0: elements/s on links of link_bps when each k-element update and each result crosses once in frame_bytes(k)
    # link_bps / (8 * frame_bytes(k)) frames/s each way, k elements each; as the protocol document
    # writes it, with 32 bits per int32 element: ATE/s <= B * (4k / frame_bytes(k)) / 32 (the goodput fraction)
    return link_bps * (ELEMENT_BYTES * k / frame_bytes(k)) / (BITS_PER_BYTE * ELEMENT_BYTES)
    # END LAB 0


def bound(link_bps: float, n_workers: int, k: int) -> float:
    """The line rate, whatever the number of workers: each sends and receives the tensor once."""
    return line_rate_ate(link_bps, k)


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


def job_pace(elements: int, parameters: SwitchMLParameters, link_bps: float, link_delay_s: float, quantized: bool) -> SwitchMLJobPace:
    """SwitchML's ``Aggregation.pace``: ``switchml_job_pace`` at the job's k and pool size."""
    return switchml_job_pace(elements, parameters.k, parameters.pool_size, link_bps, link_delay_s, quantized)


def read_parameters(section: Mapping[str, Any]) -> SwitchMLParameters:
    """A SwitchML job's parameters from its workers' spec (protocol/worker_spec.py); a
    ValueError naming what is missing or unknown."""
    try:
        return SwitchMLParameters(**section)
    except TypeError as exc:
        raise ValueError(f"not a SwitchML job's parameters ({exc})") from None


SHADOW_COPIES = 2
"""A slot holds two shadow copies of its k values (docs/dataplane.md), so that a retransmission
finds the previous result: a slot takes two registers of the budget an ATP aggregator takes one of."""

AGGREGATION = Aggregation(
    name="switchml", label="SwitchML", parameters=SwitchMLParameters.from_config, read_parameters=read_parameters,
    k_choices=K_CHOICES, defaults={"k": DEFAULT_K, "pool_size": DEFAULT_POOL_SIZE, "timeout_ms": 20.0, "backoff_every": DEFAULT_BACKOFF_EVERY, "data_path": "auto"},
    switch_defaults={"max_pool_size": MAX_POOL_SIZE}, sum_bits=PROTOCOL_BITS, drop_simulator=True,
    pool_sharing=PoolSharing(registers_per_unit=SHADOW_COPIES, partition="switches.fabric:partition_slots"),
    host="hosts.switchml.method:SwitchMLMethod",
    reset_switch="switches.switchml.programming:reset_job_state", program_fabric="switches.switchml.programming:program_fabric",
    waiting_evidence="switches.switchml.evidence:slots_evidence", pace=job_pace, data_path="hosts.switchml.native:resolve",
    tool_versions="hosts.switchml.native:tool_versions", client="hosts.switchml.method:switchml_client",
    ddp_hook="hosts.torch_hook:switch_hook", torch_backend="switchml",
    event_counters="switches.switchml.programming:read_event_counters", event_notes=INGRESS_NOTES, frame_bytes=frame_bytes, simulated_host="simulation.switchml.driver:simulated_worker",
    simulated_loop="simulation.switchml.native:STAR",
)
"""SwitchML as an in-network aggregation protocol (methods/aggregation.py)."""

SWITCHML = in_network(AGGREGATION, name="switchml", label="SwitchML", colour="tab:blue", verify=verification.integer_sum, bound=bound)
