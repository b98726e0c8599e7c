"""Programming a SwitchML switch for a job, the same way on every target.

Everything here goes through ``SwitchControl``; the names below are the P4 program's
(``p4/``) and the embedded switch's (``switches/embedded/``) alike. See docs/dataplane.md
for what each table, register and counter does. ``program_fabric`` is SwitchML's programmer
of a whole network (its record's ``program_fabric``, switches/fabric.py's ``ProgramSwitches``):
a switch with one job aggregates it (``program_aggregation``), the aggregating switch of
several jobs gives each its share (``admit_jobs``, over switches/fabric.py's ``partition_slots``), in hierarchical aggregation every leaf
aggregates its own hosts and the spine the leaves, and every other switch passes SwitchML
through as ordinary traffic. Every switch gets static L2 entries for every host and a flood
group, and answers ARP and ping for its own address (the aggregator's virtual one, a leaf's own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from protocol.switchml import params
from protocol.worker_spec import SwitchMLParameters
from switches.control import SLOT_REGISTER, SwitchControl
from switches.drop_simulator import DropSimulator
from switches.fabric import AdmissionError, Fabric, FabricJob, Leaf, Station, partition_slots

INGRESS = "SwitchMLIngress"
EGRESS = "SwitchMLEgress"

WORKER_TABLE = f"{INGRESS}.worker_table"
"""(ingress_port, ipv4.srcAddr) -> set_worker(rank, job_id, num_workers, mcast_grp, slot_base, pool_size)."""
UPLINK_TABLE = f"{INGRESS}.uplink_table"
"""meta.job_id -> set_uplink(port, src_mac, src_ipv4, dst_mac, dst_ipv4, num_workers, mcast_grp, slot_base,
pool_size): a job aggregated further up (hierarchical aggregation); miss -> this switch is the top."""
L2_TABLE = f"{INGRESS}.l2_table"
"""ethernet.dstAddr -> l2_forward(port); miss -> l2_flood."""
L2_LEARN_TABLE = f"{INGRESS}.l2_learn_table"
"""ethernet.srcAddr -> NoAction; miss -> l2_learn (digest of srcAddr + ingress port)."""
SWITCH_ADDR_TABLE = f"{INGRESS}.switch_addr_table"
"""meta.target_ipv4 -> set_switch_mac(mac): the switch's own addresses, for which it answers
ARP requests and ICMP echo requests; miss -> NoAction (ordinary traffic)."""
RANK_ADDR_TABLE = f"{EGRESS}.rank_addr_table"
"""(meta.job_id, meta.dst_rank) -> set_rank_addr(mac, ipv4, udp_port): per-rank rewrite of a result."""

BITMAP_REGISTER = SLOT_REGISTER
COUNT_REGISTER = f"{INGRESS}.count"
EXPONENT_REGISTER = f"{INGRESS}.exponent"
SEQ_REGISTER = f"{INGRESS}.seq"


def value_registers(k: int) -> tuple[str, ...]:
    """value_00 .. value_{k-1}: one accumulator register per element of a packet."""
    return tuple(f"{INGRESS}.value_{i:02d}" for i in range(k))


def aggregation_registers(k: int) -> tuple[str, ...]:
    """Per slot and shadow set (index = set * MAX_POOL_SIZE + slot_base + slot): the aggregation state."""
    return (*value_registers(k), BITMAP_REGISTER, COUNT_REGISTER, EXPONENT_REGISTER, SEQ_REGISTER)


DROP_SIMULATOR = DropSimulator(INGRESS, EGRESS)
"""SwitchMLIngress's step 1 and SwitchMLEgress's step 3 (switches/drop_simulator.py)."""
INGRESS_DROP_THRESHOLD = DROP_SIMULATOR.ingress_threshold
EGRESS_DROP_THRESHOLD = DROP_SIMULATOR.egress_threshold
"""One cell each: a packet is dropped when a uniform draw in [0, 2^32 - 2] is below it."""
set_drop_probability = DROP_SIMULATOR.set_probability

EVENT_COUNTER = f"{INGRESS}.event_counter"
EGRESS_COUNTER = f"{EGRESS}.egress_counter"


@dataclass(frozen=True)
class WorkerPort:
    """One worker as a switch sees it: where it is attached and how to address it."""

    rank: int
    switch_port: int
    mac: str
    ipv4: str
    udp_port: int = params.WORKER_UDP_PORT


@dataclass(frozen=True)
class Uplink:
    """Where a switch sends a job's partial sums in hierarchical aggregation: its port
    towards the switch above, its own addresses there (it is one worker of that switch) and
    the upper switch's address (where partial sums go, and where results come from)."""

    port: int
    mac: str
    ipv4: str
    upper_mac: str
    upper_ipv4: str


@dataclass(frozen=True)
class JobProgram:
    """What one switch needs to aggregate a job (or to forward it, if not aggregating).

    The job owns the register cells ``slot_base .. slot_base + pool_size - 1`` of each
    shadow set: its workers' slots 0..pool_size-1 land there, and a slot beyond its pool
    is dropped (EV_DROP_OUTSIDE_POOL), so jobs sharing a switch never touch each other's
    cells. ``pool_size`` None: every cell from ``slot_base`` on (a switch with one job).
    """

    job_id: int
    workers: Sequence[WorkerPort]
    result_mcast_grp: int = 2
    slot_base: int = 0
    pool_size: int | None = None
    uplink: Uplink | None = None
    """Set on a switch below the top of the job's tree (docs/dataplane.md, "Hierarchical aggregation")."""

    def __post_init__(self) -> None:
        ranks = sorted(w.rank for w in self.workers)
        if ranks != list(range(len(ranks))):
            raise ValueError(f"worker ranks must be 0..n-1, got {ranks}")
        if not 1 <= len(ranks) <= params.MAX_WORKERS:
            raise ValueError(f"a job has 1..{params.MAX_WORKERS} workers, got {len(ranks)}")
        if self.result_mcast_grp == params.FLOOD_MCAST_GRP:
            raise ValueError(f"multicast group {params.FLOOD_MCAST_GRP} is reserved for flooding")
        if self.slot_base < 0 or (self.pool_size is not None and self.pool_size < 1):
            raise ValueError(f"job {self.job_id}: slot_base must be >= 0 and pool_size >= 1, got {self.slot_base}, {self.pool_size}")

    def slots(self, max_pool_size: int) -> range:
        """The register cells (per shadow set) this job owns on a switch of ``max_pool_size`` slots."""
        end = max_pool_size if self.pool_size is None else self.slot_base + self.pool_size
        if end > max_pool_size or self.slot_base >= end:
            raise AdmissionError(
                f"job {self.job_id}: slots {self.slot_base}..{end - 1} do not fit the switch's {max_pool_size} slots"
            )
        return range(self.slot_base, end)


@dataclass(frozen=True)
class JobRequest:
    """A job asking for a share of a switch: its id, workers and pool (slots per shadow set)."""

    job_id: int
    workers: Sequence[WorkerPort]
    pool_size: int


def admit_jobs(requests: Sequence[JobRequest], max_pool_size: int, first_mcast_grp: int = 2) -> list[JobProgram]:
    """Each job its slot range (``partition_slots``) and result multicast group (from
    ``first_mcast_grp`` on, in request order)."""
    if first_mcast_grp <= params.FLOOD_MCAST_GRP < first_mcast_grp + len(requests):
        raise AdmissionError(f"multicast group {params.FLOOD_MCAST_GRP} is reserved for flooding; start job groups above it")
    ranges = partition_slots([(r.job_id, r.pool_size) for r in requests], max_pool_size)
    return [
        JobProgram(r.job_id, r.workers, first_mcast_grp + i, slot_base=cells.start, pool_size=len(cells))
        for i, (r, cells) in enumerate(zip(requests, ranges))
    ]


def program_forwarding(control: SwitchControl, ports: Sequence[int], l2_entries: Mapping[str, int]) -> None:
    """Ordinary traffic: static L2 entries for known MACs, flood group over all ports.

    The tables are cleared first: a switch that learns may already hold entries for
    packets seen since it started, and the control plane's view is authoritative.
    """
    control.table_clear(L2_TABLE)
    control.table_clear(L2_LEARN_TABLE)
    control.mc_mgrp_create(params.FLOOD_MCAST_GRP)
    control.mc_node_associate(params.FLOOD_MCAST_GRP, control.mc_node_create(0, list(ports)))
    for mac, port in l2_entries.items():
        control.table_add(L2_TABLE, "l2_forward", [mac], [port])
        control.table_add(L2_LEARN_TABLE, "NoAction", [mac])


def program_switch_address(control: SwitchControl, mac: str, ipv4: str) -> None:
    """The switch answers ARP and ping for ``ipv4`` as ``mac``, so hosts need no static ARP
    entry for it (the address lives in protocol/params.py, not in the data plane)."""
    control.table_add(SWITCH_ADDR_TABLE, "set_switch_mac", [ipv4], [mac])


def program_aggregation(control: SwitchControl, job: JobProgram) -> None:
    """Worker table, result multicast group (one node per rank, rid = rank), egress rewrite."""
    program_jobs(control, [job])


def program_jobs(control: SwitchControl, jobs: Sequence[JobProgram]) -> None:
    """Every job of one switch: its workers (with its slot range), its result multicast group
    (one node per rank, rid = rank) and its ranks' addresses. Refuses jobs whose slot
    ranges overlap or run past the switch's registers, or that share an id or a group."""
    max_pool_size = control.schema.max_pool_size
    owner: dict[int, int] = {}
    for job in jobs:
        for cell in job.slots(max_pool_size):
            if cell in owner:
                raise AdmissionError(f"jobs {owner[cell]} and {job.job_id} both claim slot cell {cell}")
            owner[cell] = job.job_id
    for attribute in ("job_id", "result_mcast_grp"):
        values = [getattr(job, attribute) for job in jobs]
        if len(set(values)) != len(values):
            raise AdmissionError(f"jobs sharing a switch need distinct {attribute}s, got {values}")
    for job in jobs:
        slots = job.slots(max_pool_size)
        n = len(job.workers)
        control.mc_mgrp_create(job.result_mcast_grp)
        for worker in job.workers:
            control.table_add(
                WORKER_TABLE, "set_worker", [worker.switch_port, worker.ipv4],
                [worker.rank, job.job_id, n, job.result_mcast_grp, slots.start, len(slots)],
            )
            handle = control.mc_node_create(worker.rank, [worker.switch_port])
            control.mc_node_associate(job.result_mcast_grp, handle)
            control.table_add(RANK_ADDR_TABLE, "set_rank_addr", [job.job_id, worker.rank], [worker.mac, worker.ipv4, worker.udp_port])
        if job.uplink is not None:
            up = job.uplink
            control.table_add(
                UPLINK_TABLE, "set_uplink", [job.job_id],
                [up.port, up.mac, up.ipv4, up.upper_mac, up.upper_ipv4, n, job.result_mcast_grp, slots.start, len(slots)],
            )


def program_pass_through(control: SwitchControl) -> None:
    """A switch on the path that does not aggregate: forward SwitchML packets as ordinary traffic."""
    control.table_set_default(WORKER_TABLE, "forward_as_ordinary")


def reset_aggregation_state(control: SwitchControl, k: int) -> None:
    """Clear every slot so the next job starts from empty bitmaps (state outlives a job).

    ``k`` is the switch's: a switch has exactly as many value registers as the k it was
    started or built with.
    """
    control.registers_reset(aggregation_registers(k))


def reset_job_state(control: SwitchControl, parameters: SwitchMLParameters) -> None:
    """SwitchML's ``Aggregation.reset_switch`` (methods/switchml.py): every slot cleared before
    the first job on a network, the switch's k being the job's."""
    reset_aggregation_state(control, parameters.k)


def read_event_counters(control: SwitchControl) -> dict[str, int]:
    """Packet counts by event name, ingress and egress, e.g. {'EV_RESULT_MULTICAST': 12, ...}."""
    ingress = control.counter_read(EVENT_COUNTER)
    egress = control.counter_read(EGRESS_COUNTER)
    counts = {name: ingress[i][0] for i, name in enumerate(params.EVENT_COUNTER_CELLS)}
    counts.update({name: egress[i][0] for i, name in enumerate(params.EGRESS_EVENTS)})
    return counts


def reset_event_counters(control: SwitchControl) -> None:
    control.counter_reset(EVENT_COUNTER)
    control.counter_reset(EGRESS_COUNTER)


def worker_port(fabric: Fabric, switch: str, rank: int, station: Station, udp_port: int = params.WORKER_UDP_PORT) -> WorkerPort:
    """``station`` as worker ``rank`` of ``switch``: attached where the path to it leaves."""
    return WorkerPort(rank, fabric.towards[switch, station.name], station.mac, station.ipv4, udp_port)


def program_fabric(controls: Mapping[str, SwitchControl], fabric: Fabric, jobs: Sequence[FabricJob]) -> None:
    """Program every switch of ``fabric`` (``controls`` by switch name) for SwitchML's ``jobs``
    (none: ordinary forwarding only)."""
    aggregator = fabric.aggregator.name
    if fabric.hierarchical and len(jobs) > 1:
        raise AdmissionError(f"hierarchical aggregation runs one job; got {len(jobs)}")
    for switch in fabric.switches:
        control = controls[switch]
        if switch != aggregator:
            if fabric.hierarchical and jobs:
                program_aggregation(control, _leaf_job(fabric, fabric.leaves[switch], jobs[0]))
            else:
                program_pass_through(control)
        elif fabric.hierarchical and jobs:
            program_aggregation(control, _spine_job(fabric, jobs[0]))
        elif len(jobs) > 1:
            program_jobs(control, admit_jobs(_job_requests(fabric, jobs), control.schema.max_pool_size))
        elif jobs:
            [job] = jobs
            workers = [worker_port(fabric, switch, rank, fabric.host(name)) for rank, name in enumerate(job.hosts)]
            program_aggregation(control, JobProgram(job.job_id, workers, pool_size=job.pool_size))
        program_forwarding(control, fabric.ports[switch], fabric.l2_entries(switch))
        own = fabric.own_station(switch)
        program_switch_address(control, own.mac, own.ipv4)
        DROP_SIMULATOR.program_drop_rates(control, fabric, switch)


def _job_requests(fabric: Fabric, jobs: Sequence[FabricJob]) -> list[JobRequest]:
    """Each shared job's workers as the aggregating switch sees them, and its pool."""
    aggregator = fabric.aggregator.name
    return [JobRequest(job.job_id, [worker_port(fabric, aggregator, rank, fabric.host(name)) for rank, name in enumerate(job.hosts)],
                       job.pool_size)
            for job in jobs]


def _spine_job(fabric: Fabric, job: FabricJob) -> JobProgram:
    """Hierarchical aggregation at the spine: the leaves are its workers, answered on the
    aggregation port so that their parsers take the results as SwitchML."""
    spine = fabric.aggregator.name
    leaves = [leaf.station for leaf in fabric.leaves.values() if leaf.hosts]
    workers = [worker_port(fabric, spine, rank, leaf, udp_port=params.UDP_PORT_BASE) for rank, leaf in enumerate(leaves)]
    return JobProgram(job.job_id, workers, pool_size=job.pool_size)


def _leaf_job(fabric: Fabric, leaf: Leaf, job: FabricJob) -> JobProgram:
    """Hierarchical aggregation at a leaf: its own hosts, and the spine above (the
    aggregator's virtual address, which the workers send to)."""
    name, up = leaf.station.name, fabric.aggregator
    uplink = Uplink(fabric.towards[name, up.name], leaf.station.mac, leaf.station.ipv4, up.mac, up.ipv4)
    workers = [worker_port(fabric, name, rank, fabric.host(host)) for rank, host in enumerate(leaf.hosts)]
    return JobProgram(job.job_id, workers, uplink=uplink, pool_size=job.pool_size)
