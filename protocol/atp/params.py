"""ATP's build parameters: the one definition every ATP component reads.

SwitchML reads its constants from p4/switchml/include/constants.p4; ATP has no P4 program yet, so they
are written here, and the P4_16 program, when it exists, will take them from a generated
header (docs/dataplane-atp.md, "Constants"). The values follow the authors' code where it
fits the testbed (one switch, one PS per job, <= 32 workers) and say so where they differ.
"""

from __future__ import annotations

from types import MappingProxyType

UDP_PORT_BASE = 0xBEF0
"""ATP packets carry a UDP destination port in 0xBEF0..0xBEFF (SwitchML's range is 0xBEE0..0xBEEF),
instead of the authors' EtherType 0x0700: every target's parser and the hosts' sockets already
speak UDP."""
UDP_PORT_MASK = 0xFFF0
PS_UDP_PORT = UDP_PORT_BASE
"""Where workers address their packets (to the job's PS, through the switch)."""
SWITCH_UDP_PORT = UDP_PORT_BASE + 1
"""Where the PS addresses its results (to the switch, which multicasts them)."""
WORKER_UDP_PORT = UDP_PORT_BASE + 2
"""The port the switch's egress writes into each worker's copy of a result by default."""

MAX_WORKERS = 32
"""The bitmap is 32 bits: one bit per worker of a job."""
DEFAULT_POOL_SIZE = 4096
"""Aggregators shared by every job on the switch (the authors' Tofino build has 20,000; the
embedded and bmv2 switches keep the same k int32 registers per aggregator as SwitchML's slots,
so the budget is a register count the multi-tenant experiment sweeps)."""
MAX_POOL_SIZE = 0xFFFF
"""The aggregator index is 16 bits; index 0xFFFF is never used (NO_INDEX)."""
NO_INDEX = 0xFFFF
"""new_agtr of a result that re-points nothing."""
DEFAULT_WINDOW = 64
"""Positions a worker cycles through (the authors' default W is 100 per sender thread): its
window never exceeds them, so two sequences in flight never share an aggregator."""

FLAG_ACK = 0x01
"""A result from the PS (also the acknowledgement)."""
FLAG_COLLISION = 0x02
"""To the PS: the switch found the aggregator taken. From the PS: adopt new_agtr."""
FLAG_RESEND = 0x04
"""A worker's retransmission: never claims, flushes its own aggregator."""
FLAG_ECN = 0x08
"""Congestion seen on the path or earlier at this aggregator (sticky per aggregator)."""
FLAG_OVERFLOW = 0x80
"""The payload is not summable in the switch: forwarded to the PS untouched. Our workers
never set it (protocol/atp/quantize.py says why); the switch honours it as ATP's does."""
KNOWN_FLAGS = FLAG_ACK | FLAG_COLLISION | FLAG_RESEND | FLAG_ECN | FLAG_OVERFLOW

INGRESS_EVENTS: tuple[str, ...] = (
    "EV_AGGREGATED",
    "EV_FULL_TO_PS",
    "EV_COLLISION_TO_PS",
    "EV_DUPLICATE_DROPPED",
    "EV_DUPLICATE_TO_PS",
    "EV_RESEND_FLUSHED",
    "EV_RESEND_PASSED",
    "EV_OVERFLOW_TO_PS",
    "EV_RESULT_FREED",
    "EV_RESULT_NOT_OWNER",
    "EV_DROP_MALFORMED",
    "EV_DROP_UNKNOWN_SENDER",
    "EV_DROP_WRONG_JOB",
    "EV_FORWARDED",
)
"""What happened to each packet: ATPIngress.event_counter's cells in index order. Every
frame the ingress takes counts under exactly one. Collisions, full sums (EV_FULL_TO_PS),
partial sums (EV_RESEND_FLUSHED) and resends by cause (flushed, passed) are the ATP
metrics beyond SwitchML's."""
EVENT = MappingProxyType({name: index for index, name in enumerate(INGRESS_EVENTS)})
EGRESS_EVENTS: tuple[str, ...] = ("EGV_SENT", "EGV_ECN_MARKED")
"""ATPEgress.egress_counter's cells: every departing copy, and those it marked."""
EGRESS_EVENT = MappingProxyType({name: index for index, name in enumerate(EGRESS_EVENTS)})

DEFAULT_ECN_THRESHOLD = 64
"""Queue depth (packets) at which egress marks: the authors' Tofino build marks at 1,000
cells; a software switch's queue is counted in packets."""


def is_atp_port(udp_dst_port: int) -> bool:
    """True for a UDP destination port in ATP's range (as the parser selects)."""
    return udp_dst_port & UDP_PORT_MASK == UDP_PORT_BASE

FLOOD_MCAST_GRP = 1
"""The multicast group l2_flood uses (every port); jobs' result groups are programmed above it."""
SENDER_TABLE_SIZE = 1024
"""ATPIngress.sender_table entries: every worker and PS of every job on the switch."""
WORKER_ADDR_TABLE_SIZE = 1024
"""ATPEgress.worker_addr_table entries: one per (job, worker)."""
L2_TABLE_SIZE = 1024
