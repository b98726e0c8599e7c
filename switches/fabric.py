"""What a network hands the switches' control plane: its switches, hosts and ports as a
``Fabric``, and its jobs as ``FabricJob``s, whatever protocol they run.

The network (network/emulation.py, simulation/network.py) knows the topology and which port
of which switch leads where; it hands those facts over as a ``Fabric`` with the open
control-plane connections, and the protocol's programmer (its record's ``program_fabric``,
a ``ProgramSwitches``) decides what each switch holds: which aggregates what, its tables and
multicast groups, how it forwards ordinary traffic and answers for its own address.
SwitchML's is ``switches/switchml/programming.py``'s ``program_fabric``. Nothing here knows a protocol:
a job is its protocol's typed parameters (a dataclass with at least ``k``, ``job_id`` and
``pool_size``, methods/aggregation.py's ``JobParameters``), its workers and its servers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

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
    """One of several jobs on the aggregating switch, as a config gives it: its id, its
    workers' hosts (rank order) and its pool, in its protocol's unit (``jobs_sharing``)."""

    job_id: int
    hosts: tuple[str, ...]
    pool_size: int


@dataclass(frozen=True)
class FabricJob:
    """One job the switches are programmed for."""

    parameters: Any
    """Its protocol's typed job parameters (``k``, ``job_id``, ``pool_size`` and its own)."""
    hosts: tuple[str, ...]
    """Its workers' hosts, in rank order."""
    servers: tuple[str, ...] = ()
    """The hosts its protocol runs beside the workers (``Aggregation.servers_per_job``), cabled to the aggregating switch."""

    @property
    def job_id(self) -> int:
        return self.parameters.job_id

    @property
    def pool_size(self) -> int:
        return self.parameters.pool_size


def jobs_sharing(parameters: Any, hosts: Sequence[str], shared: Sequence[SharedJob] = ()) -> tuple[FabricJob, ...]:
    """One job of every host with ``parameters``; or, where ``shared`` lists several, each
    with its own id, hosts and pool (the rest of ``parameters``, a dataclass, alike)."""
    if not shared:
        return (FabricJob(parameters, tuple(hosts)),)
    return tuple(FabricJob(dataclasses.replace(parameters, job_id=job.job_id, pool_size=job.pool_size), job.hosts) for job in shared)


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
    """Every worker host, in rank order."""
    hierarchical: bool
    ports: Mapping[str, tuple[int, ...]]
    """Per switch, its data ports."""
    towards: Mapping[tuple[str, str], int]
    """(switch, node) -> the port of ``switch`` on the path to ``node`` (a host, a server or a switch)."""
    drop_rates: Mapping[str, tuple[float, float]] | None = None
    """Per switch, the drop simulator's (ingress, egress) probabilities; None: no loss to emulate."""
    servers: tuple[Station, ...] = ()
    """The hosts the jobs' protocol runs beside the workers, cabled to the aggregating switch (``FabricJob.servers``)."""

    def aggregating(self) -> list[str]:
        """The switches that hold aggregation state: the aggregator, and in hierarchical
        aggregation every leaf with hosts."""
        if not self.hierarchical:
            return [self.aggregator.name]
        return [s for s in self.switches if s == self.aggregator.name or self.leaves[s].hosts]

    def host(self, name: str) -> Station:
        """A worker host or a server by name."""
        return next(h for h in (*self.hosts, *self.servers) if h.name == name)

    def own_station(self, switch: str) -> Station:
        """The address ``switch`` answers for: the aggregator's virtual one, a leaf's own."""
        return self.aggregator if switch == self.aggregator.name else self.leaves[switch].station

    def l2_entries(self, switch: str) -> dict[str, int]:
        """MAC -> port of ``switch`` for every host and server, and, on a switch other than the
        aggregator, for the aggregator's virtual address: the static entries of ordinary forwarding."""
        entries = {station.mac: self.towards[switch, station.name] for station in (*self.hosts, *self.servers)}
        if switch != self.aggregator.name:
            entries[self.aggregator.mac] = self.towards[switch, self.aggregator.name]
        return entries


ProgramSwitches = Callable[[Mapping[str, SwitchControl], Fabric, Sequence[FabricJob]], None]
"""A protocol's programmer (its record's ``program_fabric``): every switch of ``fabric``
(``controls`` by switch name) programmed for ``jobs``, which all run that protocol; with no
job, for ordinary forwarding alone. It is called on switches just started (empty tables)."""


class AdmissionError(ValueError):
    """Jobs that cannot share one switch: their pools do not fit its registers together,
    or they would share a job id, a multicast group or a worker."""


def partition_slots(pools: Sequence[tuple[int, int]], max_pool_size: int) -> list[range]:
    """(job id, pool size) per job -> each job's cells: consecutive ranges in the given order.

    Refuses (AdmissionError) when the pools together exceed the switch's slots, rather than
    shrinking them: a job's pool size is a protocol parameter its workers were started with
    (they send slots 0..pool-1), and a smaller pool than asked for would change the job's
    throughput without anyone having chosen it."""
    ids = [job_id for job_id, _ in pools]
    if len(set(ids)) != len(ids):
        raise AdmissionError(f"job ids must differ between jobs sharing a switch, got {ids}")
    total = sum(pool for _, pool in pools)
    if total > max_pool_size:
        asked = " + ".join(f"{pool} (job {job_id})" for job_id, pool in pools)
        raise AdmissionError(
            f"admission refused: the jobs' pools need {asked} = {total} slots, the switch has {max_pool_size} "
            f"(switch.max_pool_size); give the jobs smaller pools or fewer jobs"
        )
    ranges, base = [], 0
    for _, pool in pools:
        ranges.append(range(base, base + pool))
        base += pool
    return ranges
