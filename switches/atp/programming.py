"""Programming an ATP switch for a job, the same way on every target (docs/dataplane-atp.md,
"Control plane, per job").

Everything goes through ``SwitchControl`` with the names of docs/dataplane-atp.md, which the
embedded pipeline (switches/embedded/atp/) has and the bmv2 and eBPF programs take, as
switches/programming.py does for SwitchML. ``reset_job_state`` is ATP's
``Aggregation.reset_switch`` (methods/atp.py); ``program_job`` is what a network installs for
each ATP job once its workers and its parameter server are attached.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from protocol.atp import params
from protocol.atp.job import ATPParameters
from switches.control import SwitchControl

INGRESS = "ATPIngress"
EGRESS = "ATPEgress"
SENDER_TABLE = f"{INGRESS}.sender_table"
"""(ingress_port, ipv4.srcAddr) -> set_worker(app_id, worker_id, num_workers, ps_port) | set_ps(app_id, mcast_grp)."""
WORKER_ADDR_TABLE = f"{EGRESS}.worker_addr_table"
"""(meta.app_id, egress_rid) -> set_worker_addr(mac, ipv4, udp_port): each worker's copy of a result."""
ECN_THRESHOLD = f"{EGRESS}.ecn_threshold"
EVENT_COUNTER = f"{INGRESS}.event_counter"
EGRESS_COUNTER = f"{EGRESS}.egress_counter"
AGGREGATOR_REGISTERS = tuple(f"{INGRESS}.{name}" for name in ("owner_app", "owner_seq", "bitmap", "count", "ecn"))
"""An aggregator's owner tag and state; its values need no reset (the first contributor writes)."""


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
    control.register_write(ECN_THRESHOLD, 0, parameters.ecn_threshold)


def program_job(control: SwitchControl, job_id: int, workers: Sequence[Host], ps: Host) -> None:
    """A job's senders (each worker, in rank order, and its PS), its result group (one node
    per worker, rid = its rank) and each worker's result address."""
    group = result_group(job_id)
    control.mc_mgrp_create(group)
    for rank, worker in enumerate(workers):
        control.table_add(SENDER_TABLE, "set_worker", [worker.switch_port, worker.ipv4], [job_id, rank, len(workers), ps.switch_port])
        control.table_add(WORKER_ADDR_TABLE, "set_worker_addr", [job_id, rank], [worker.mac, worker.ipv4, worker.udp_port])
        control.mc_node_associate(group, control.mc_node_create(rank, [worker.switch_port]))
    control.table_add(SENDER_TABLE, "set_ps", [ps.switch_port, ps.ipv4], [job_id, group])
