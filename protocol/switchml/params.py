"""SwitchML's build parameters, read from its P4 program's own constants file.

``p4/switchml/include/constants.p4`` is the one definition of k, the pool size, the UDP ports and
the counter indices. This module reads its ``#define NAME value`` lines
(``protocol.params.read_p4_constants``) so the Python side (workers, switches, control
plane) can never disagree with the P4 program. It also holds the defaults a job takes when
its config names none.
"""

from __future__ import annotations

from protocol.params import P4_DIR, check_max_workers, read_p4_constants

P4_MAIN = P4_DIR / "switchml.p4"
"""SwitchML's P4 program, the file p4c compiles (its parts in P4_PROGRAM_DIR)."""
P4_PROGRAM_DIR = P4_DIR / "switchml"
"""The program's parts: its include/ folder and its per-k generator gen_elements.py."""
CONSTANTS_P4 = P4_PROGRAM_DIR / "include" / "constants.p4"
P4_CONSTANTS = read_p4_constants(CONSTANTS_P4)

P4_SOURCE_K: int = P4_CONSTANTS["SWITCHML_K"]
"""constants.p4's k (elements per packet): the k of the per-element code checked in under
p4/switchml/include (what p4c by hand builds, and what tests of the P4 source read). Not the k a
job, a switch or a build gets when it names none: every one of them is given its k."""
DEFAULT_K: int = 256
"""Elements per packet when a config or a command names none: the reference client's
packet_numel (1 KiB of int32 per packet, 95 % of the frame), which every switch target
builds for."""
DEFAULT_POOL_SIZE: int = 64
"""Slots a job uses when a config or a command names none."""
K_CHOICES: tuple[int, ...] = (32, 64, 128, 256)
"""The k an experiment may choose: every switch target builds its program for each of them
(p4/switchml/gen_elements.py, each target's compile.py); the experiment schema's protocol.k enum."""
MAX_POOL_SIZE: int = P4_CONSTANTS["SWITCHML_MAX_POOL_SIZE"]
MAX_WORKERS: int = P4_CONSTANTS["SWITCHML_MAX_WORKERS"]
check_max_workers("SwitchML", MAX_WORKERS, CONSTANTS_P4)
UDP_PORT_BASE: int = P4_CONSTANTS["SWITCHML_UDP_PORT_BASE"]
UDP_PORT_MASK: int = P4_CONSTANTS["SWITCHML_UDP_PORT_MASK"]
WORKER_UDP_PORT: int = P4_CONSTANTS["SWITCHML_WORKER_UDP_PORT"]
MSG_UPDATE: int = P4_CONSTANTS["SWITCHML_MSG_UPDATE"]
MSG_RESULT: int = P4_CONSTANTS["SWITCHML_MSG_RESULT"]
FLOOD_MCAST_GRP: int = P4_CONSTANTS["SWITCHML_FLOOD_MCAST_GRP"]
L2_TABLE_SIZE: int = P4_CONSTANTS["SWITCHML_L2_TABLE_SIZE"]
"""Entries of l2_learn_table and of l2_table on every target (docs/dataplane.md, "Tables")."""
DEFAULT_BACKOFF_EVERY: int = 100
"""Double only after many timeouts of a slot, as the reference implementation does: one lost
update times out every worker of the job, so doubling on each timeout, TCP's rule, backs off
innocent workers and stalls the pool (benchmarks/README.md, "The worker's retransmission timers")."""


INGRESS_EVENTS: tuple[str, ...] = (
    "EV_UPDATE_CONSUMED",
    "EV_RESULT_MULTICAST",
    "EV_RESULT_UNICAST",
    "EV_RETX_IGNORED",
    "EV_DROP_UNKNOWN_SENDER",
    "EV_DROP_WRONG_JOB",
    "EV_DROP_MALFORMED",
    "EV_DROP_SIM_INGRESS",
    "EV_FORWARDED",
    "EV_DROP_STALE",
    "EV_DROP_OUTSIDE_POOL",
    "EV_PARTIAL_UP",
    "EV_ARP_REPLY",
    "EV_ICMP_ECHO_REPLY",
)
"""What happened to each packet: the first cells of SwitchMLIngress.event_counter, in index
order (checked at import). Every packet the ingress takes in counts under exactly one of
them, so their sum is the frames the pipeline took in."""
INGRESS_NOTES: tuple[str, ...] = ("EV_L2_NOT_LEARNED",)
"""The cells after them: counted besides a packet's own event (a frame whose source MAC
could not be learned is EV_FORWARDED too), so not part of that sum."""
EVENT_COUNTER_CELLS: tuple[str, ...] = INGRESS_EVENTS + INGRESS_NOTES
"""Every cell of SwitchMLIngress.event_counter, in index order."""
EGRESS_EVENTS: tuple[str, ...] = ("EGV_SENT", "EGV_DROP_SIM_EGRESS")
"""Names of SwitchMLEgress.egress_counter's cells, in index order (checked at import)."""


def _check_event_order(names: tuple[str, ...], count_name: str) -> None:
    indices = [P4_CONSTANTS[name] for name in names]
    if indices != list(range(len(names))) or P4_CONSTANTS[count_name] != len(names):
        raise RuntimeError(f"{CONSTANTS_P4}: {count_name} indices are not 0..n-1 in the order of {names}")


_check_event_order(EVENT_COUNTER_CELLS, "EV_COUNT")
_check_event_order(EGRESS_EVENTS, "EGV_COUNT")


def is_aggregation_port(udp_dst_port: int) -> bool:
    """True for a UDP destination port in the aggregation range (as the P4 parser selects)."""
    return udp_dst_port & UDP_PORT_MASK == UDP_PORT_BASE
