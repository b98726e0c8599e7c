"""A topology on the simulated clock: its switches (their targets' own data planes), its
links (link.py), its hosts' workers, programmed as in emulation.

The switches run the program of the protocol the network is built for (``protocol``: the
target's ``simulated`` data plane of it) and are programmed by that protocol's
``program_fabric`` (its record, methods/aggregation.py)
from the same ``Fabric`` the emulated network hands it (switches/topology_fabric.py), over
each simulated switch's in-process control plane: forwarding, the switch's address,
aggregation (star, tree, hierarchical, or several jobs sharing the aggregating switch), the
drop simulator. Port numbers follow the topology's links: a switch's port i (from 1) is its
i-th link in the topology file's order, as Mininet numbers them. Every link direction gets
its LinkSpec's rate, delay and queue; the links' loss is either each link's own
(``simulated_link_loss``, netem's model) or the switches' drop simulators
(``switch_drop_simulator``), as ``loss_mechanism`` asks.

A host's worker is attached to the network (``attach``: any ``SimulatedHost``, host.py),
or built with it for a network made by hand (the tests', the labs' benchmarks:
``JobSetup.worker``). The hosts' workers run on SimPy, or on their protocol's compiled event
loop (``native``: its record's ``simulated_loop``) where it runs the network's shape.
"""

from __future__ import annotations

import functools
import random
from dataclasses import dataclass, replace
from typing import Any, Callable, Generator, Mapping, Protocol, Sequence

import numpy as np
import simpy

from base.plugin import resolve
import methods
from methods.aggregation import Aggregation, JobParameters
from switches.topology_fabric import topology_fabric
from protocol.params import mbps_to_bps
from simulation.host import ServerHost, SimulatedHost
from simulation.link import Arrivals, Deliver, Link
from switches.control import SwitchControl
from switches.fabric import FabricJob, SharedJob, Station, jobs_sharing
from switches.target import SimulatedSwitch, SwitchTarget
from topologies.model import LinkDef, Topology

PYTHON_CORE = "python"
"""The hosts' workers on SimPy (simulation/host.py's drivers): every network."""
NATIVE_CORE = "native"
"""The hosts' workers on their protocol's compiled event loop (``NativeLoop``): the shapes it runs."""
LINK_LOSS = "simulated_link_loss"
DROP_SIMULATOR = "switch_drop_simulator"
NO_LOSS = "none"


@dataclass(frozen=True)
class RankStarts:
    """When each rank of a released job starts, after its job's release.

    The emulator tells a job's ranks to start one after another through their pipes, and each
    process starts when the scheduler runs it (experiments/workers.py, ``release``). So rank r
    starts r x ``skew_s`` after the release and, with ``jitter_s``, a scheduling delay later
    drawn for each rank and release from an exponential distribution of that mean (the
    network's seeded ``start_rng``), so that a point's repetitions differ as the emulated ones
    do and their mean is over the same randomness. The default starts every rank together.
    benchmarks/rank_starts.py measures both from an emulated run's per-rank times."""

    skew_s: float = 0.0
    jitter_s: float = 0.0

    def __post_init__(self) -> None:
        if self.skew_s < 0 or self.jitter_s < 0:
            raise ValueError(f"a rank's start skew and jitter must be >= 0 s, got {self.skew_s} and {self.jitter_s}")

    @property
    def together(self) -> bool:
        """Every rank starts at its job's release."""
        return not (self.skew_s or self.jitter_s)

    def delays(self, ranks: int, rng: random.Random) -> list[float]:
        """Each of ``ranks`` ranks' start after its job's release, drawn from ``rng``."""
        return [rank * self.skew_s + (rng.expovariate(1 / self.jitter_s) if self.jitter_s else 0.0) for rank in range(ranks)]


class SimulationUnsupported(ValueError):
    """A config the simulator cannot run (yet): the message names what."""


def loss_mechanism_of(topology: Topology, requested: str) -> str:
    """How the links' loss is simulated: each link's own unless the config asks for the
    switches' drop simulator (``loss_mechanism: switch``), as emulation without netem does."""
    if {link.spec.loss for link in topology.links} == {0.0}:
        return NO_LOSS
    return DROP_SIMULATOR if requested == "switch" else LINK_LOSS


HostFactory = Callable[[simpy.Environment, int, Station, Station], "SimulatedHost | None"]
"""(the network's clock, a host's index in topology order, its station, the aggregating
switch's station) -> the worker it runs, or None for a host in no job or whose worker is
attached later (``SimulatedNetwork.attach``)."""


@dataclass(frozen=True)
class JobSetup:
    """The job of a simulated network (every host a worker, in rank order), or the jobs
    sharing its aggregating switch (``shared``: each its own hosts, slots and group): the
    switch's part of its protocol's job parameters (methods/aggregation.py's ``JobParameters``)."""

    k: int
    pool_size: int
    max_pool_size: int
    job_id: int
    worker: HostFactory = lambda env, index, host, switch: None
    """Each host's worker, built with the network (a network made by hand: the tests', the labs')."""
    shared: tuple[SharedJob, ...] = ()


@dataclass(frozen=True)
class LoopShape:
    """What of a network decides whether a compiled event loop runs it."""

    switches: int
    hosts_in_job: int
    hosts: int
    shared_jobs: int
    drop_simulator: bool
    """Loss by the switches' drop simulator (else on the links, or none)."""
    packet_cost_s: float
    """The hosts' processing per packet (0: ideal hosts)."""


class LoopRun(Protocol):
    """A compiled event loop holding a network's state between its all-reduces."""

    @property
    def now(self) -> float:
        """The simulated clock."""

    def allreduce(self, tensors: Sequence[np.ndarray]) -> list[Any]:
        """Every worker's all-reduce of its tensor (by host index), released at once; each
        one's result or TimeoutError, as its SimPy driver returns them."""


class NativeLoop(Protocol):
    """A protocol's event loop in C for the simulated clock (its record's ``simulated_loop``):
    the same events as its SimPy driver, for the shapes of network it runs."""

    name: str
    """What it is, in words ("simulation/switchml/native/star.c's event loop")."""
    scope: str
    """The networks it runs, in words ("a star of one job with loss on its links (...)")."""

    def build(self) -> None:
        """Build and load it here, once per process; DataPathUnavailable naming why it cannot be."""

    def problem(self, shape: LoopShape, switch: SimulatedSwitch) -> str | None:
        """What of a network of ``shape``, whose switches are like ``switch``, it does not run (None: it runs it)."""

    def run(self, network: "SimulatedNetwork") -> LoopRun:
        """``network`` (of a shape it runs) handed over to it, with its workers attached."""


class SimulatedNetwork:
    """``topology`` with switches of ``target``'s data-plane contract, programmed for ``job``:
    ``data_plane``'s simulated switches (``target``'s own if it has them: the targets share
    one contract, docs/dataplane.md, so one target's simulated pipeline stands for another's)."""

    def __init__(self, topology: Topology, target: SwitchTarget, job: JobSetup, loss_mechanism: str = "auto", seed: int = 1,
                 link_burst_bytes: float = 0.0, data_plane: SwitchTarget | None = None, native: NativeLoop | None = None,
                 protocol: Aggregation | None = None, servers: Mapping[int, tuple[Station, ...]] | None = None,
                 switch_packet_cost_s: float = 0.0) -> None:
        """``native``: the protocol's compiled event loop that runs the workers (None: SimPy);
        ``protocol``: the record of the protocol whose program its switches run, which
        programs them for ``job`` (``program_fabric``), reads their event counters
        (``event_counters``) and resets them (None: the data plane's default protocol's);
        ``servers``: each job's hosts besides its workers (switches/topology_fabric.py's
        ``server_stations``), cabled to the aggregating switch with the workers' link spec,
        their programs attached later (``attach_server``); ``switch_packet_cost_s``: each
        switch's time per frame it receives, one frame at a time (0: each processed at its
        arrival; SimPy only)."""
        data_plane = data_plane or target
        if switch_packet_cost_s < 0:
            raise ValueError(f"a switch's cost per frame must be >= 0 s, got {switch_packet_cost_s}")
        if switch_packet_cost_s and native is not None:
            raise SimulationUnsupported("the native core's loop processes every frame at its arrival; a switch's cost per frame runs on SimPy")
        self._switch_packet_cost_s = switch_packet_cost_s
        if data_plane.simulated is None:
            raise SimulationUnsupported(f"switch target {data_plane.name} has no simulated data plane (SwitchTarget.simulated)")
        unshaped = [f"{link.a}-{link.b}" for link in topology.links if link.spec.bw_mbps is None]
        if unshaped:
            raise SimulationUnsupported(f"links without a rate cannot be simulated: {', '.join(unshaped)} (give bw_mbps)")
        protocol = protocol or methods.aggregation(data_plane.default_protocol)
        if protocol.program_fabric is None:
            raise SimulationUnsupported(f"{protocol.label} programs no network (its record names no program_fabric)")
        self.env = simpy.Environment()
        self.topology = topology
        self.k = job.k
        """Elements per packet, which its switches were built for."""
        self._job = job
        self._protocol = protocol
        self.shared_jobs = len(job.shared)
        self._target = target.name
        self._data_plane = data_plane.name
        self.loss_mechanism = loss_mechanism_of(topology, loss_mechanism)
        rng = random.Random(seed)
        self.switches: dict[str, SimulatedSwitch] = {
            s.name: data_plane.simulated(k=job.k, max_pool_size=job.max_pool_size, seed=rng.randrange(1 << 32), protocol=protocol.name)
            for s in topology.switches
        }
        self._switch_free_at: dict[str, float] = {}
        """switch -> when it is done with the frames it has taken (with a cost per frame)."""
        self.ports: dict[str, dict[str, int]] = {name: {} for name in self.switches}
        """switch -> neighbour -> the switch's port to it."""
        self._switch_station = Station(topology.aggregator.name, topology.aggregator_mac, topology.aggregator_ipv4)
        self.workers: dict[int, SimulatedHost] = {}
        """host index -> its worker."""
        self._index = {host.name: i for i, host in enumerate(topology.hosts)}
        self.links: dict[tuple[str, str], Link] = {}
        """(from, to) -> that direction's link."""
        self.servers: dict[str, Station] = {station.name: station for stations in (servers or {}).values() for station in stations}
        """Server host name -> its station (its job's, ``servers``)."""
        self.server_hosts: dict[str, ServerHost] = {}
        """Server host name -> what runs on it, once attached."""
        link_loss = self.loss_mechanism == LINK_LOSS
        arrivals = Arrivals(self.env)
        aggregator = topology.aggregator.name
        worker_link = next(link.spec for link in topology.links if topology.hosts[0].name in (link.a, link.b))
        cables = [*topology.links, *(LinkDef(name, aggregator, worker_link) for name in self.servers)]
        for link in cables:
            for a, b in ((link.a, link.b), (link.b, link.a)):
                if b in self.switches:
                    self.ports[b][a] = len(self.ports[b]) + 1
        for link in cables:
            spec = link.spec
            for a, b in ((link.a, link.b), (link.b, link.a)):
                deliver = self._switch_input(b, self.ports[b][a]) if b in self.switches else self._host_input(b)
                self.links[a, b] = Link(self.env, arrivals, mbps_to_bps(spec.bw_mbps), spec.delay_ms / 1000, spec.queue_packets,
                                        spec.loss if link_loss else 0.0, random.Random(rng.randrange(1 << 32)), deliver,
                                        link_burst_bytes)
        for name, switch in self.switches.items():
            egress_queue = getattr(switch, "egress_queue", None)  # a program that reads its egress queues (ATP's ECN)
            for neighbour, port in self.ports[name].items():
                switch.connect(port, self._transmit(self.links[name, neighbour]))
                if egress_queue is not None:
                    egress_queue(port, self.links[name, neighbour].depth)
        self.controls: dict[str, SwitchControl] = {name: switch.control() for name, switch in self.switches.items()}
        self.fabric = topology_fabric(topology, self._port_towards, {n: tuple(p.values()) for n, p in self.ports.items()},
                                      self.loss_mechanism == DROP_SIMULATOR, tuple(self.servers.values()))
        resolve(protocol.program_fabric)(self.controls, self.fabric, self._fabric_jobs(job, servers or {}))
        self._read_counters = None if protocol.event_counters is None else resolve(protocol.event_counters)
        self.start_rng = random.Random(rng.randrange(1 << 32))
        """Draws the ranks' start delays (``RankStarts``), after every other seed of ``seed``'s."""
        self._loop = native
        self._native: LoopRun | None = None
        self.core = PYTHON_CORE if native is None else NATIVE_CORE
        """Which loop runs the workers: SimPy's (PYTHON_CORE) or their protocol's compiled one (NATIVE_CORE)."""
        for index, host in enumerate(topology.hosts):
            worker = job.worker(self.env, index, Station(host.name, host.mac, host.ipv4), self._switch_station)
            if worker is not None:
                self.attach(index, worker)
        if native is not None and self.workers:
            self._native = self._native_loop()

    def _fabric_jobs(self, job: JobSetup, servers: Mapping[int, tuple[Station, ...]]) -> tuple[FabricJob, ...]:
        """``job`` (or the jobs sharing the switch) as the protocol's programmer takes them,
        each with its server hosts (``servers``, by job id)."""
        jobs = jobs_sharing(job, [host.name for host in self.topology.hosts], job.shared)
        return tuple(replace(j, servers=tuple(s.name for s in servers.get(j.job_id, ()))) for j in jobs)

    @property
    def switch_station(self) -> Station:
        """The address the workers send to: the aggregating switch's."""
        return self._switch_station

    def attach(self, index: int, worker: SimulatedHost) -> None:
        """``worker`` as host ``index``'s (topology order): frames reaching the host go to it,
        and it sends on the host's link towards its switch."""
        if self._native is not None:
            raise RuntimeError("the native loop runs the workers the network was built with; attach them before it runs")
        name = self.topology.hosts[index].name
        worker.uplink = self.links[name, self.topology.neighbours(name)[0]]
        self.workers[index] = worker

    def attach_server(self, name: str, server: ServerHost) -> None:
        """``server`` as server host ``name``'s program: frames reaching the host go to it, and
        it answers on the host's link to the aggregating switch."""
        server.uplink = self.links[name, self.topology.aggregator.name]
        self.server_hosts[name] = server

    def _native_loop(self) -> LoopRun:
        """This network on its protocol's compiled loop; SimulationUnsupported naming what of
        the network that loop does not run."""
        shape = LoopShape(len(self.switches), len(self.workers), len(self.topology.hosts), self.shared_jobs,
                          self.loss_mechanism == DROP_SIMULATOR, max((w.packet_cost_s for w in self.workers.values()), default=0.0))
        problem = self._loop.problem(shape, next(iter(self.switches.values())))  # every switch runs one data plane
        if problem is not None:
            raise SimulationUnsupported(f"the native core runs {self._loop.scope}; this network has {problem}")
        return self._loop.run(self)

    @property
    def now(self) -> float:
        """The simulated clock."""
        return self.env.now if self._native is None else self._native.now

    def _port_towards(self, switch: str, node: str) -> int:
        if node in self.servers:  # cabled to the aggregating switch
            aggregator = self.topology.aggregator.name
            return self.ports[switch][node if switch == aggregator else self.topology.next_hop(switch, aggregator)]
        return self.ports[switch][self.topology.next_hop(switch, node)]

    def _host_input(self, host: str) -> Deliver:
        """Frames reaching ``host``: to its worker or server, once one is attached (else dropped, as by a host that runs none)."""
        attached, key = (self.server_hosts, host) if host in self.servers else (self.workers, self._index[host])

        def deliver(frames: list[bytes]) -> None:
            program = attached.get(key)
            if program is not None:
                program.deliver(frames)

        return deliver

    def _switch_input(self, switch: str, port: int) -> Deliver:
        """Frames reaching ``switch`` at ``port``: processed at their arrival, or with a cost per
        frame one at a time in arrival order (the switch's ``_switch_free_at``), as the embedded
        switch's one thread takes them, each leaving the pipeline that long after the switch
        was done with the one before."""
        receive, cost, env = self.switches[switch].receive, self._switch_packet_cost_s, self.env
        if not cost:
            def deliver(frames: list[bytes]) -> None:
                for frame in frames:
                    receive(port, frame)

            return deliver

        def processed(frame: bytes, _event: simpy.Event) -> None:
            receive(port, frame)

        def deliver_in_turn(frames: list[bytes]) -> None:
            for frame in frames:
                self._switch_free_at[switch] = max(env.now, self._switch_free_at.get(switch, 0.0)) + cost
                env.timeout(self._switch_free_at[switch] - env.now).callbacks.append(functools.partial(processed, frame))

        return deliver_in_turn

    @staticmethod
    def _transmit(link: Link) -> Callable[[memoryview], None]:
        send = link.send
        return lambda frame: send(bytes(frame))

    @property
    def aggregating_controls(self) -> list[SwitchControl]:
        """The switches that hold aggregation state (Fabric.aggregating)."""
        return [self.controls[name] for name in self.fabric.aggregating()]

    def reset_aggregation(self, parameters: JobParameters | None = None) -> None:
        """Every aggregating switch's protocol state zeroed by its record's ``reset_switch``, for
        a network made by hand (a run's method prepares its own: ``Method.prepare``), with the
        job's typed ``parameters`` (None: the switch's part of them, ``JobSetup``'s k, pool and
        job id, which is all SwitchML's reset reads)."""
        self._protocol.reset(self.aggregating_controls, self._job if parameters is None else parameters)

    def allreduce(self, tensors: Sequence[np.ndarray]) -> list[Any]:
        """Every worker all-reduces its tensor (by host index), all released at the simulated
        now; runs the clock until the last has its result. The worker's TimeoutError when one misses its deadline."""
        if len(tensors) != len(self.workers):
            raise ValueError(f"{len(self.workers)} workers, {len(tensors)} tensors")
        return self.run_jobs([(range(len(tensors)), tensors, 0.0)])[0]

    def run_jobs(self, jobs: Sequence[tuple[Sequence[int], Sequence[np.ndarray], float]],
                 reset_counters: bool = True, starts: RankStarts = RankStarts()) -> list[list[Any]]:
        """Each job (its hosts by index, their tensors, its release after the simulated now)
        all-reduced by its workers; every job's results (``values``, ``int_sum``, ``stats``), by
        rank. The worker's TimeoutError when one misses its deadline. ``reset_counters``: the
        switches' counters count these jobs only (else they go on from ``reset_counters``).
        ``starts``: when each rank of a job starts after its job's release."""
        if reset_counters:
            self.reset_counters()
        if self._loop is not None and self._native is None:
            self._native = self._native_loop()
        if self._native is not None:
            if not starts.together:
                raise ValueError("the native core releases every rank at once; ranks started apart run on SimPy")
            outcomes = [self._native_job(jobs)]
        else:
            outcomes = self._simpy_jobs(jobs, starts)
        for outcome in (o for job in outcomes for o in job):
            if isinstance(outcome, TimeoutError):
                raise outcome
        return outcomes

    def _native_job(self, jobs: Sequence[tuple[Sequence[int], Sequence[np.ndarray], float]]) -> list[Any]:
        [(hosts, tensors, after_s)] = jobs
        if list(hosts) != list(range(len(self.workers))) or after_s:
            raise ValueError("the native core runs one all-reduce of every host, released at once (allreduce)")
        return self._native.allreduce(tensors)

    def _simpy_jobs(self, jobs: Sequence[tuple[Sequence[int], Sequence[np.ndarray], float]], starts: RankStarts) -> list[list[Any]]:
        env = self.env

        def released(worker: SimulatedHost, tensor: np.ndarray, after_s: float) -> Generator[simpy.Event, object, object]:
            if after_s > 0:
                yield env.timeout(after_s)
            return (yield from worker.allreduce(tensor))

        processes = [[env.process(released(self.workers[host], tensor, after_s + delay))
                      for host, tensor, delay in zip(hosts, tensors, starts.delays(len(hosts), self.start_rng), strict=True)]
                     for hosts, tensors, after_s in jobs]
        env.run(env.all_of([process for job in processes for process in job]))
        return [[process.value for process in job] for job in processes]

    def reset_counters(self) -> None:
        """Every counter of every switch's program to zero."""
        for control in self.controls.values():
            for counter in control.schema.counters:
                control.counter_reset(counter)

    def event_counters(self) -> dict[str, dict[str, int]]:
        """Every switch's event counters since they were last reset (by default as each run began), by counter name."""
        if self._read_counters is None:
            return {}
        return {name: self._read_counters(control) for name, control in self.controls.items()}

    def describe(self) -> dict[str, Any]:
        """network.json's record of a simulated network: network.json's keys of an emulated
        one, each link direction's model in words."""
        delays = {link.spec.delay_ms for link in self.topology.links}
        return {
            "simulated": True,
            "target": self._target,
            "worker_core": self.core,
            "data_plane": self._target if self._data_plane == self._target else
            f"{self._data_plane}'s simulated pipeline, standing for {self._target}'s (one data-plane contract: docs/dataplane.md)",
            "loss_mechanism": self.loss_mechanism,
            "delay_mechanism": "none" if delays == {0.0} else "simulated_link_delay",
            "aggregation": self.topology.aggregation,
            "links": [
                {"link": f"{a}->{b}", "bandwidth": f"{link.spec.bw_mbps:g} Mbit/s", "queue": f"drop-tail {link.spec.queue_packets} packets",
                 "delay": f"{link.spec.delay_ms:g} ms", "loss": f"{link.spec.loss:g}" if self.loss_mechanism == LINK_LOSS else "none"}
                for link in self.topology.links for a, b in ((link.a, link.b), (link.b, link.a))
            ],
            **({"server_hosts": {name: {"ipv4": s.ipv4, "mac": s.mac, "cabled_to": self.topology.aggregator.name}
                            for name, s in self.servers.items()}} if self.servers else {}),
        }
