"""ATP's build parameters, read from the P4 program's own constants file.

``p4/atp/include/constants.p4`` is the one definition of the ports, flags, pool and table
sizes and counter indices; this module reads its ``#define`` lines (protocol/params.py's
reader), so the embedded pipeline, the hosts and the bmv2 program cannot disagree. The
values follow the authors' code where it fits the testbed (one switch, one PS per job, <= 32
workers) and say so where they differ (constants.p4's comments, docs/dataplane-atp.md).
"""

from __future__ import annotations

from types import MappingProxyType

from protocol.params import P4_DIR, check_max_workers, read_p4_constants

ATP_P4_MAIN = P4_DIR / "atp.p4"
"""ATP's P4 program, the file p4c compiles (its parts in ATP_P4_DIR)."""
ATP_P4_DIR = P4_DIR / "atp"
CONSTANTS_P4 = ATP_P4_DIR / "include" / "constants.p4"
P4_CONSTANTS = read_p4_constants(CONSTANTS_P4)

P4_SOURCE_K: int = P4_CONSTANTS["ATP_K"]
"""The k of the per-value code checked in under p4/atp/include (what p4c by hand builds). A
switch or job is always given its k, one of K_CHOICES."""
K_CHOICES: tuple[int, ...] = (32, 64, 128, 256)
"""The k an ATP job may choose, each a build of every target's program: the same k as
SwitchML's, so the two protocols' runs compare frame for frame."""

UDP_PORT_BASE: int = P4_CONSTANTS["ATP_UDP_PORT_BASE"]
"""ATP packets carry a UDP destination port in 0xBEF0..0xBEFF (SwitchML's range is 0xBEE0..0xBEEF),
instead of the authors' EtherType 0x0700: every target's parser and the hosts' sockets already
speak UDP."""
UDP_PORT_MASK: int = P4_CONSTANTS["ATP_UDP_PORT_MASK"]
PS_UDP_PORT: int = P4_CONSTANTS["ATP_PS_UDP_PORT"]
"""Where workers address their packets (to the job's PS, through the switch)."""
SWITCH_UDP_PORT: int = P4_CONSTANTS["ATP_SWITCH_UDP_PORT"]
"""Where the PS addresses its results (to the switch, which multicasts them)."""
WORKER_UDP_PORT: int = P4_CONSTANTS["ATP_WORKER_UDP_PORT"]
"""The port the switch's egress writes into each worker's copy of a result by default."""

MAX_WORKERS: int = P4_CONSTANTS["ATP_MAX_WORKERS"]
"""The bitmap is 32 bits: one bit per worker of a job."""
check_max_workers("ATP", MAX_WORKERS, CONSTANTS_P4)
DEFAULT_POOL_SIZE: int = P4_CONSTANTS["ATP_POOL_SIZE"]
"""Aggregators shared by every job on the switch (the authors' Tofino build has 20,000; the
embedded and bmv2 switches keep the same k int32 registers per aggregator as SwitchML's slots,
so the budget is a register count the multi-tenant experiment sweeps)."""
MAX_POOL_SIZE: int = P4_CONSTANTS["ATP_MAX_POOL_SIZE"]
"""The aggregator index is 16 bits; index 0xFFFF is never used (NO_INDEX)."""
NO_INDEX: int = P4_CONSTANTS["ATP_NO_INDEX"]
"""new_agtr of a result that re-points nothing."""
DEFAULT_WINDOW = 64
"""Positions a worker cycles through (the authors' default W is 100 per sender thread): its
window never exceeds them, so two sequences in flight never share an aggregator. A host
parameter: the switch never sees it, so it is not in constants.p4."""

FLAG_ACK: int = P4_CONSTANTS["ATP_FLAG_ACK"]
"""A result from the PS (also the acknowledgement)."""
FLAG_COLLISION: int = P4_CONSTANTS["ATP_FLAG_COLLISION"]
"""To the PS: the switch found the aggregator taken. From the PS: adopt new_agtr."""
FLAG_RESEND: int = P4_CONSTANTS["ATP_FLAG_RESEND"]
"""A worker's retransmission: never claims, flushes its own aggregator."""
FLAG_ECN: int = P4_CONSTANTS["ATP_FLAG_ECN"]
"""Congestion seen on the path or earlier at this aggregator (sticky per aggregator)."""
FLAG_OVERFLOW: int = P4_CONSTANTS["ATP_FLAG_OVERFLOW"]
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
    "EV_DROP_SIM_INGRESS",
)
"""What happened to each packet: ATPIngress.event_counter's cells in index order (checked
against constants.p4 at import). Every frame the ingress takes counts under exactly one.
Collisions, full sums (EV_FULL_TO_PS), partial sums (EV_RESEND_FLUSHED) and resends by cause
(flushed, passed) are the ATP metrics beyond SwitchML's; the drop simulator's drops
(EV_DROP_SIM_INGRESS, EGV_DROP_SIM_EGRESS) carry SwitchML's names, so a run's emulated
losses read alike for both."""
EVENT = MappingProxyType({name: index for index, name in enumerate(INGRESS_EVENTS)})
EGRESS_EVENTS: tuple[str, ...] = ("EGV_SENT", "EGV_ECN_MARKED", "EGV_DROP_SIM_EGRESS")
"""ATPEgress.egress_counter's cells: every departing copy, those it marked, and the copies
the drop simulator dropped instead of sending."""
EGRESS_EVENT = MappingProxyType({name: index for index, name in enumerate(EGRESS_EVENTS)})

DEFAULT_ECN_THRESHOLD: int = P4_CONSTANTS["ATP_DEFAULT_ECN_THRESHOLD"]
"""Queue depth (packets) at which egress marks: the authors' Tofino build marks at 1,000
cells; a software switch's queue is counted in packets."""


def _check_event_order(names: tuple[str, ...], count_name: str) -> None:
    indices = [P4_CONSTANTS[name] for name in names]
    if indices != list(range(len(names))) or P4_CONSTANTS[count_name] != len(names):
        raise RuntimeError(f"{CONSTANTS_P4}: {count_name} indices are not 0..n-1 in the order of {names}")


_check_event_order(INGRESS_EVENTS, "EV_COUNT")
_check_event_order(EGRESS_EVENTS, "EGV_COUNT")


def is_atp_port(udp_dst_port: int) -> bool:
    """True for a UDP destination port in ATP's range (as the parser selects)."""
    return udp_dst_port & UDP_PORT_MASK == UDP_PORT_BASE

FLOOD_MCAST_GRP: int = P4_CONSTANTS["ATP_FLOOD_MCAST_GRP"]
"""The multicast group l2_flood uses (every port); jobs' result groups are programmed above it."""
SENDER_TABLE_SIZE: int = P4_CONSTANTS["ATP_SENDER_TABLE_SIZE"]
"""ATPIngress.sender_table entries: every worker and PS of every job on the switch."""
WORKER_ADDR_TABLE_SIZE: int = P4_CONSTANTS["ATP_WORKER_ADDR_TABLE_SIZE"]
"""ATPEgress.worker_addr_table entries: one per (job, worker)."""
L2_TABLE_SIZE: int = P4_CONSTANTS["ATP_L2_TABLE_SIZE"]
