"""What the control plane installs for ATP, through any ``SwitchControl``.

Written against the SwitchControl interface, so one set of calls programs bmv2 (over Thrift)
and the embedded ATPPipeline (``InProcessControl``), and a differential test can hold them to
the same entries. Per switch: the flood group and the ECN threshold; per job: a
``set_worker`` entry per worker and a ``set_ps`` entry for its PS in sender_table, a result
group with one node per worker (rid = worker id), and each worker's address in
worker_addr_table (docs/dataplane-atp.md, "Control plane, per job").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from protocol.atp import params
from protocol.packet import ipv4_to_bytes, mac_to_bytes
from switches.control import ControlPlaneError, SwitchControl

SENDER_TABLE = "ATPIngress.sender_table"
L2_TABLE = "ATPIngress.l2_table"
WORKER_ADDR_TABLE = "ATPEgress.worker_addr_table"
EVENT_COUNTER = "ATPIngress.event_counter"
EGRESS_COUNTER = "ATPEgress.egress_counter"
ECN_THRESHOLD = "ATPEgress.ecn_threshold"
POOL_REGISTER_PREFIX = "ATPIngress."
"""Every ATPIngress register is per aggregator: the pool's state."""


@dataclass(frozen=True)
class ATPWorker:
    """A worker as the switch sees it: its port, its address (what its packets come from,
    where its result copies go)."""

    port: int
    mac: str
    ipv4: str
    udp_port: int = params.WORKER_UDP_PORT


@dataclass(frozen=True)
class ATPJob:
    """One job on the switch: its app_id, workers in id order, its PS and its result group."""

    app_id: int
    workers: Sequence[ATPWorker]
    ps_port: int
    ps_ipv4: str
    mcast_grp: int

    def __post_init__(self) -> None:
        if not 1 <= len(self.workers) <= params.MAX_WORKERS:
            raise ControlPlaneError(
                f"ATP job {self.app_id}: 1..{params.MAX_WORKERS} workers (the bitmap), got {len(self.workers)}")
        if self.mcast_grp == params.FLOOD_MCAST_GRP:
            raise ControlPlaneError(f"ATP job {self.app_id}: multicast group {self.mcast_grp} is the flood group")


def program_flood(control: SwitchControl, ports: Sequence[int]) -> None:
    """The flood group of ordinary traffic: one node (rid 0) with every port."""
    control.mc_mgrp_create(params.FLOOD_MCAST_GRP)
    control.mc_node_associate(params.FLOOD_MCAST_GRP, control.mc_node_create(0, sorted(ports)))


def program_host(control: SwitchControl, mac: str, port: int) -> None:
    """Ordinary traffic to ``mac`` leaves on ``port`` (no learning: the control plane knows the hosts)."""
    control.table_add(L2_TABLE, "l2_forward", [mac], [port])


def program_job(control: SwitchControl, job: ATPJob) -> None:
    """A job's senders, result group and worker addresses."""
    control.mc_mgrp_create(job.mcast_grp)
    for worker_id, worker in enumerate(job.workers):
        control.table_add(SENDER_TABLE, "set_worker", [worker.port, worker.ipv4],
                          [job.app_id, worker_id, len(job.workers), job.ps_port])
        control.table_add(WORKER_ADDR_TABLE, "set_worker_addr", [job.app_id, worker_id],
                          [int.from_bytes(mac_to_bytes(worker.mac), "big"), int.from_bytes(ipv4_to_bytes(worker.ipv4), "big"),
                           worker.udp_port])
        control.mc_node_associate(job.mcast_grp, control.mc_node_create(worker_id, [worker.port]))
    control.table_add(SENDER_TABLE, "set_ps", [job.ps_port, job.ps_ipv4], [job.app_id, job.mcast_grp])


def set_ecn_threshold(control: SwitchControl, packets: int = params.DEFAULT_ECN_THRESHOLD) -> None:
    """Egress marks an ATP packet leaving a queue at least ``packets`` deep; 0 never marks.
    bmv2's registers start at 0, so a bmv2 switch marks only once this is written."""
    control.register_write(ECN_THRESHOLD, 0, packets)


def reset_pool(control: SwitchControl) -> None:
    """Every aggregator free and zeroed, and both counters at 0 (between tests or jobs)."""
    control.registers_reset([name for name in control.schema.registers if name.startswith(POOL_REGISTER_PREFIX)])
    control.counter_reset(EVENT_COUNTER)
    control.counter_reset(EGRESS_COUNTER)


def read_counters(control: SwitchControl) -> dict[str, tuple[int, int]]:
    """(packets, bytes) of every cell of both counters, by event name."""
    ingress = control.counter_read(EVENT_COUNTER)
    egress = control.counter_read(EGRESS_COUNTER)
    return {**dict(zip(params.INGRESS_EVENTS, map(tuple, ingress), strict=True)),
            **dict(zip(params.EGRESS_EVENTS, map(tuple, egress), strict=True))}


def read_events(control: SwitchControl) -> dict[str, int]:
    """Packets counted in every cell of both counters, by event name."""
    return {name: packets for name, (packets, _) in read_counters(control).items()}
