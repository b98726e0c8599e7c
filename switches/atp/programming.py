"""Programming an ATP switch for a job, the same way on every target (docs/dataplane-atp.md,
"Control plane, per job").

Everything goes through ``SwitchControl`` with the names of docs/dataplane-atp.md, which the
embedded pipeline (switches/embedded/atp/) has and the bmv2 and eBPF programs take, as
switches/switchml/programming.py does for SwitchML: one set of calls programs every target, and the
differential tests hold the targets to the same entries. ``reset_job_state`` is ATP's
``Aggregation.reset_switch`` (methods/atp.py); ``program_job`` is what a network installs for
each ATP job once its workers and its parameter server are attached; the flood group, the
known hosts and the ECN threshold are per switch; ``program_fabric`` (the record's) does all of
it for a network's fabric, on either clock, and ``read_event_counters`` (its
``event_counters``) reads what the switch counted. What only one target has stays in its
folder: bmv2's egress queue rate per port (switches/bmv2/atp/control.py), eBPF's phantom
queue rate per port (switches/ebpf/atp/control.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from base.yamlschema import ConfigError
from protocol.atp import params
from protocol.atp.job import ATPParameters
from switches.control import ControlPlaneError, SwitchControl
from switches.drop_simulator import DropSimulator
from switches.fabric import Fabric, FabricJob

INGRESS = "ATPIngress"
EGRESS = "ATPEgress"
SENDER_TABLE = f"{INGRESS}.sender_table"
"""(ingress_port, ipv4.srcAddr) -> set_worker(app_id, worker_id, num_workers, ps_port) | set_ps(app_id, mcast_grp)."""
L2_TABLE = f"{INGRESS}.l2_table"
"""ethernet.dstAddr -> l2_forward(port); miss -> flood (ordinary traffic)."""
WORKER_ADDR_TABLE = f"{EGRESS}.worker_addr_table"
"""(meta.app_id, egress_rid) -> set_worker_addr(mac, ipv4, udp_port): each worker's copy of a result."""
ECN_THRESHOLD = f"{EGRESS}.ecn_threshold"
EVENT_COUNTER = f"{INGRESS}.event_counter"
EGRESS_COUNTER = f"{EGRESS}.egress_counter"
AGGREGATOR_REGISTERS = tuple(f"{INGRESS}.{name}" for name in ("owner_app", "owner_seq", "bitmap", "count", "ecn"))
"""An aggregator's owner tag and state; its values need no reset (the first contributor writes)."""
DROP_SIMULATOR = DropSimulator(INGRESS, EGRESS)
"""ATPIngress's step 0 and ATPEgress's first step, named and programmed as SwitchML's
(switches/drop_simulator.py): a lossy network without netem sets it from ``Fabric.drop_rates``."""


@dataclass(frozen=True)
class Host:
    """A worker or a parameter server as the switch sees it: its port, its addresses."""

    switch_port: int
    mac: str
    ipv4: str
    udp_port: int = params.WORKER_UDP_PORT
    """Where the switch sends a worker its copy of a result (unused for the PS)."""


def result_group(job_id: int) -> int:
    """The multicast group of a job's results: one per job, above the flood group."""
    return params.FLOOD_MCAST_GRP + 1 + job_id


def reset_job_state(control: SwitchControl, parameters: ATPParameters) -> None:
    """Every aggregator free, and the ECN threshold the job's parameters give: the pool as
    the switch starts, before the first ATP job on a network (ATP's ``reset_switch``)."""
    control.registers_reset(AGGREGATOR_REGISTERS)
    set_ecn_threshold(control, parameters.ecn_threshold)


def program_job(control: SwitchControl, job_id: int, workers: Sequence[Host], ps: Host) -> None:
    """A job's senders (each worker, in rank order, and its PS), its result group (one node
    per worker, rid = its rank) and each worker's result address."""
    if not 1 <= len(workers) <= params.MAX_WORKERS:
        raise ControlPlaneError(f"ATP job {job_id}: 1..{params.MAX_WORKERS} workers (the bitmap's width), got {len(workers)}")
    group = result_group(job_id)
    control.mc_mgrp_create(group)
    for rank, worker in enumerate(workers):
        control.table_add(SENDER_TABLE, "set_worker", [worker.switch_port, worker.ipv4], [job_id, rank, len(workers), ps.switch_port])
        control.table_add(WORKER_ADDR_TABLE, "set_worker_addr", [job_id, rank], [worker.mac, worker.ipv4, worker.udp_port])
        control.mc_node_associate(group, control.mc_node_create(rank, [worker.switch_port]))
    control.table_add(SENDER_TABLE, "set_ps", [ps.switch_port, ps.ipv4], [job_id, group])


def program_flood(control: SwitchControl, ports: Sequence[int]) -> None:
    """The flood group of ordinary traffic (``l2_table``'s miss): one node, rid 0, every port."""
    control.mc_mgrp_create(params.FLOOD_MCAST_GRP)
    control.mc_node_associate(params.FLOOD_MCAST_GRP, control.mc_node_create(0, sorted(ports)))


def program_host(control: SwitchControl, mac: str, port: int) -> None:
    """Ordinary traffic to ``mac`` leaves on ``port`` (no learning: the control plane knows the hosts)."""
    control.table_add(L2_TABLE, "l2_forward", [mac], [port])


def set_ecn_threshold(control: SwitchControl, packets: int = params.DEFAULT_ECN_THRESHOLD) -> None:
    """Egress marks an ATP packet leaving a queue at least ``packets`` deep; 0 never marks.
    bmv2's registers start at 0, so a bmv2 switch marks only once this is written."""
    control.register_write(ECN_THRESHOLD, 0, packets)


def reset_pool(control: SwitchControl) -> None:
    """Every aggregator free and zeroed (its values too) and both counters at 0: a switch as
    it started, between tests or runs (the tables and the drop simulator's thresholds stay)."""
    control.registers_reset([name for name in control.schema.registers
                             if name.startswith(f"{INGRESS}.") and name != DROP_SIMULATOR.ingress_threshold])
    control.counter_reset(EVENT_COUNTER)
    control.counter_reset(EGRESS_COUNTER)


def read_counters(control: SwitchControl) -> dict[str, tuple[int, int]]:
    """(packets, bytes) of every cell of both counters, by event name (params.INGRESS_EVENTS, EGRESS_EVENTS)."""
    ingress = control.counter_read(EVENT_COUNTER)
    egress = control.counter_read(EGRESS_COUNTER)
    return {**dict(zip(params.INGRESS_EVENTS, map(tuple, ingress), strict=True)),
            **dict(zip(params.EGRESS_EVENTS, map(tuple, egress), strict=True))}


def read_event_counters(control: SwitchControl) -> dict[str, int]:
    """ATP's record's ``event_counters``: packets per ingress event (collisions, full sums and
    flushed partial sums to the PS, resends by cause, ...) and per egress event (sent, ECN-marked)."""
    return {event: packets for event, (packets, _bytes) in read_counters(control).items()}


def program_fabric(controls: Mapping[str, SwitchControl], fabric: Fabric, jobs: Sequence[FabricJob]) -> None:
    """ATP's record's ``program_fabric``: the aggregating switch of a star programmed for every
    job (its workers' hosts in rank order, its parameter server its first server host), with
    the flood group, an ``l2_table`` entry for every host and server, and its drop simulator
    at the fabric's rates where the links' loss is the switch's to emulate. A switch between a
    worker and the aggregating one would drop its packets (ATP's program passes no other job's
    ATP traffic), so a fabric with leaves is refused, naming them, in one line: a ConfigError,
    before any job runs."""
    if fabric.leaves:
        raise ConfigError(f"topology: ATP's jobs run on a star (its program aggregates at the switch the workers are cabled to); "
                          f"this one's leaves {', '.join(fabric.leaves)} would drop their packets")
    switch = fabric.aggregator.name
    control = controls[switch]
    program_flood(control, fabric.ports[switch])
    for station in (*fabric.hosts, *fabric.servers):
        program_host(control, station.mac, fabric.towards[switch, station.name])
    DROP_SIMULATOR.program_drop_rates(control, fabric, switch)

    def host(name: str) -> Host:
        station = fabric.host(name)
        return Host(fabric.towards[switch, name], station.mac, station.ipv4)

    for job in jobs:
        if not job.servers:
            raise ValueError(f"ATP job {job.job_id} has no parameter server on the fabric (FabricJob.servers)")
        program_job(control, job.job_id, [host(name) for name in job.hosts], host(job.servers[0]))
