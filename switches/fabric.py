"""Programming every switch of a network for its jobs: which switch aggregates what, and
how each forwards the rest.

The network (network/emulation.py) knows the topology and which port of which switch
leads where; it hands those facts over as a ``Fabric`` and the open control-plane
connections, and this module decides, the same way for every target: a switch with one
job aggregates it (``program_aggregation``), the aggregating switch of several jobs gives
each its share (``admit_jobs``), in hierarchical aggregation every leaf aggregates its own
hosts and the spine the leaves, and every other switch passes SwitchML through as
ordinary traffic. Every switch gets static L2 entries for every host and a flood group,
and answers ARP and ping for its own address (the aggregator's virtual one, a leaf's own).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from protocol.switchml import params
from switches import programming
from switches.control import SwitchControl


@dataclass(frozen=True)
class Station:
    """Something a switch addresses: a host, a leaf as one worker of the spine, or the
    aggregating switch's virtual address."""

    name: str
    mac: str
    ipv4: str


@dataclass(frozen=True)
class Leaf:
    """A switch below the aggregating one: its own address towards the spine, and the
    hosts cabled to it (rank order), which it aggregates in hierarchical aggregation."""

    station: Station
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class SharedJob:
    """One of several jobs on the aggregating switch: its id, its workers' hosts (rank
    order) and its pool; the control plane gives it its own slots and multicast group."""

    job_id: int
    hosts: tuple[str, ...]
    pool_size: int


@dataclass(frozen=True)
class Jobs:
    """What runs on the fabric: one job (``job_id``, every host a worker, ``pool_size``
    slots), unless ``shared`` lists several on the aggregating switch."""

    job_id: int
    pool_size: int
    max_pool_size: int
    shared: tuple[SharedJob, ...] = ()


@dataclass(frozen=True)
class Fabric:
    """The network as the control plane needs it: names, addresses and port numbers."""

    switches: tuple[str, ...]
    """Every switch, in topology order."""
    aggregator: Station
    """The aggregating switch, named as a switch, addressed as the workers' aggregator."""
    leaves: Mapping[str, Leaf]
    """Every other switch by name, in topology order."""
    hosts: tuple[Station, ...]
    """Every host, in rank order."""
    hierarchical: bool
    ports: Mapping[str, tuple[int, ...]]
    """Per switch, its data ports."""
    towards: Mapping[tuple[str, str], int]
    """(switch, node) -> the port of ``switch`` on the path to ``node`` (a host or a switch)."""
    drop_rates: Mapping[str, tuple[float, float]] | None = None
    """Per switch, the drop simulator's (ingress, egress) probabilities; None: no loss to emulate."""

    def aggregating(self) -> list[str]:
        """The switches that hold aggregation state: the aggregator, and in hierarchical
        aggregation every leaf with hosts."""
        if not self.hierarchical:
            return [self.aggregator.name]
        return [s for s in self.switches if s == self.aggregator.name or self.leaves[s].hosts]

    def worker(self, switch: str, rank: int, station: Station, udp_port: int = params.WORKER_UDP_PORT) -> programming.WorkerPort:
        """``station`` as worker ``rank`` of ``switch``: attached where the path to it leaves."""
        return programming.WorkerPort(rank, self.towards[switch, station.name], station.mac, station.ipv4, udp_port)

    def host(self, name: str) -> Station:
        return next(h for h in self.hosts if h.name == name)


def program_fabric(controls: Mapping[str, SwitchControl], fabric: Fabric, jobs: Jobs) -> None:
    """Program every switch of ``fabric`` (``controls`` by switch name) for ``jobs``."""
    aggregator = fabric.aggregator.name
    for switch in fabric.switches:
        control = controls[switch]
        l2 = {h.mac: fabric.towards[switch, h.name] for h in fabric.hosts}
        if switch != aggregator:
            l2[fabric.aggregator.mac] = fabric.towards[switch, aggregator]
            if fabric.hierarchical:
                programming.program_aggregation(control, _leaf_job(fabric, fabric.leaves[switch], jobs))
            else:
                programming.program_pass_through(control)
        elif fabric.hierarchical:
            programming.program_aggregation(control, _spine_job(fabric, jobs))
        elif jobs.shared:
            programming.program_jobs(control, programming.admit_jobs(_job_requests(fabric, jobs.shared), jobs.max_pool_size))
        else:
            workers = [fabric.worker(switch, rank, h) for rank, h in enumerate(fabric.hosts)]
            programming.program_aggregation(control, programming.JobProgram(jobs.job_id, workers, pool_size=jobs.pool_size))
        programming.program_forwarding(control, fabric.ports[switch], l2)
        own = fabric.aggregator if switch == aggregator else fabric.leaves[switch].station
        programming.program_switch_address(control, own.mac, own.ipv4)
        if fabric.drop_rates is not None:
            programming.set_drop_probability(control, *fabric.drop_rates[switch])


def _job_requests(fabric: Fabric, shared: Sequence[SharedJob]) -> list[programming.JobRequest]:
    """Each shared job's workers as the aggregating switch sees them, and its pool."""
    aggregator = fabric.aggregator.name
    return [
        programming.JobRequest(job.job_id, [fabric.worker(aggregator, rank, fabric.host(name)) for rank, name in enumerate(job.hosts)],
                               job.pool_size)
        for job in shared
    ]


def _spine_job(fabric: Fabric, jobs: Jobs) -> programming.JobProgram:
    """Hierarchical aggregation at the spine: the leaves are its workers, answered on the
    aggregation port so that their parsers take the results as SwitchML."""
    spine = fabric.aggregator.name
    leaves = [leaf.station for leaf in fabric.leaves.values() if leaf.hosts]
    workers = [fabric.worker(spine, rank, leaf, udp_port=params.UDP_PORT_BASE) for rank, leaf in enumerate(leaves)]
    return programming.JobProgram(jobs.job_id, workers, pool_size=jobs.pool_size)


def _leaf_job(fabric: Fabric, leaf: Leaf, jobs: Jobs) -> programming.JobProgram:
    """Hierarchical aggregation at a leaf: its own hosts, and the spine above (the
    aggregator's virtual address, which the workers send to)."""
    name, up = leaf.station.name, fabric.aggregator
    uplink = programming.Uplink(fabric.towards[name, up.name], leaf.station.mac, leaf.station.ipv4, up.mac, up.ipv4)
    workers = [fabric.worker(name, rank, fabric.host(host)) for rank, host in enumerate(leaf.hosts)]
    return programming.JobProgram(jobs.job_id, workers, uplink=uplink, pool_size=jobs.pool_size)
