"""What the control plane installs for ATP (docs/dataplane-atp.md, "Control plane, per job"),
through the common SwitchControl interface: any target's ATP program takes the same calls
(the embedded pipeline's through its in-process control, this target's through its maps).

Per job: sender_table's set_worker for each worker (its port and IPv4) and set_ps for its
PS, a result group with one node per worker (rid = worker id), worker_addr_table's address
per worker. Per switch: the flood group and l2_table's entries for known hosts, and, on this
target, each port's phantom queue rate (its link rate) and the ECN threshold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from protocol.atp import params
from switches.control import SwitchControl

SENDER_TABLE = "ATPIngress.sender_table"
L2_TABLE = "ATPIngress.l2_table"
WORKER_ADDR_TABLE = "ATPEgress.worker_addr_table"
ECN_THRESHOLD = "ATPEgress.ecn_threshold"
PHANTOM_QUEUE_RATE = "ATPEgress.phantom_queue_rate"
EVENT_COUNTER = "ATPIngress.event_counter"
EGRESS_COUNTER = "ATPEgress.egress_counter"
AGGREGATOR_REGISTERS = tuple(f"ATPIngress.{name}" for name in ("owner_app", "owner_seq", "bitmap", "count", "ecn"))


@dataclass(frozen=True)
class AtpHost:
    """A worker or PS as the switch knows it: its port and addresses."""

    port: int
    mac: str
    ipv4: str
    udp_port: int = params.WORKER_UDP_PORT


def result_group(app_id: int) -> int:
    """The multicast group of a job's results (above the flood group)."""
    return params.FLOOD_MCAST_GRP + 1 + app_id


def program_job(control: SwitchControl, app_id: int, workers: Sequence[AtpHost], ps: AtpHost) -> None:
    """A job's senders, its result group and its workers' addresses."""
    group = result_group(app_id)
    control.mc_mgrp_create(group)
    for worker_id, worker in enumerate(workers):
        control.table_add(SENDER_TABLE, "set_worker", [worker.port, worker.ipv4], [app_id, worker_id, len(workers), ps.port])
        control.table_add(WORKER_ADDR_TABLE, "set_worker_addr", [app_id, worker_id], [worker.mac, worker.ipv4, worker.udp_port])
        control.mc_node_associate(group, control.mc_node_create(worker_id, [worker.port]))
    control.table_add(SENDER_TABLE, "set_ps", [ps.port, ps.ipv4], [app_id, group])


def program_forwarding(control: SwitchControl, ports: Sequence[int], hosts: Mapping[str, int]) -> None:
    """The flood group of every port, and l2_table's entry (MAC -> port) for each known host."""
    control.mc_mgrp_create(params.FLOOD_MCAST_GRP)
    control.mc_node_associate(params.FLOOD_MCAST_GRP, control.mc_node_create(0, list(ports)))
    for mac, port in hosts.items():
        control.table_add(L2_TABLE, "l2_forward", [mac], [port])


def set_phantom_queue_rates(control: SwitchControl, rates_bps: Mapping[int, float]) -> None:
    """Each port's phantom queue drains at its link rate (bit/s; 0: no phantom queue)."""
    for port, rate in rates_bps.items():
        control.register_write(PHANTOM_QUEUE_RATE, port, round(rate / 1000))


def read_events(control: SwitchControl) -> dict[str, int]:
    """Packets per ingress event and per egress event, by name, that happened at least once."""
    counted = dict(zip(params.INGRESS_EVENTS, control.counter_read(EVENT_COUNTER)))
    counted.update(zip(params.EGRESS_EVENTS, control.counter_read(EGRESS_COUNTER)))
    return {name: packets for name, (packets, _bytes) in counted.items() if packets}
