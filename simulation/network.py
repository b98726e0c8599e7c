"""A topology on the simulated clock: its switches (their targets' own data planes), its
links (link.py), its hosts' SwitchML workers (worker.py), programmed as in emulation.

The switches are programmed by ``switches/fabric.py``'s ``program_fabric`` from the same
``Fabric`` the emulated network hands it (network/topology_fabric.py), over each simulated
switch's in-process control plane: forwarding, the switch's address, aggregation (star,
tree, hierarchical, or several jobs sharing the aggregating switch), the drop simulator. Port numbers follow the topology's links: a
switch's port i (from 1) is its i-th link in the topology file's order, as Mininet numbers
them. Every link direction gets its LinkSpec's rate, delay and queue; the links' loss is
either each link's own (``simulated_link_loss``, netem's model) or the switches' drop
simulators (``switch_drop_simulator``), as ``loss_mechanism`` asks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Generator, Sequence

import numpy as np
import simpy

from network.topology_fabric import topology_fabric
from hosts.switchml.job import AllReduceResult, SwitchMLTimeout
from protocol.switchml import params
from protocol.packet import Endpoint
from protocol.params import mbps_to_bps
from simulation.link import Arrivals, Deliver, Link
from simulation.native.star import TO_NOBODY, TO_SWITCH, TO_WORKER, NativeStar, has_aggregation_path, star_problem
from simulation.worker import SimulatedWorker, WorkerSetup
from switches import programming
from switches.control import SwitchControl
from switches.fabric import Jobs, SharedJob, program_fabric
from switches.target import SimulatedSwitch, SwitchTarget
from topologies.model import Topology

PYTHON_CORE = "python"
"""hosts/switchml/core.py under simulation/worker.py's driver, on SimPy: every network."""
NATIVE_CORE = "native"
"""hosts/switchml/native/worker.c under simulation/native/star.c's event loop: a star of one job."""
WORKER_CORES = (PYTHON_CORE, NATIVE_CORE)
LINK_LOSS = "simulated_link_loss"
DROP_SIMULATOR = "switch_drop_simulator"
NO_LOSS = "none"


class SimulationUnsupported(ValueError):
    """A config the simulator cannot run (yet): the message names what."""


def loss_mechanism_of(topology: Topology, requested: str) -> str:
    """How the links' loss is simulated: each link's own unless the config asks for the
    switches' drop simulator (``loss_mechanism: switch``), as emulation without netem does."""
    if {link.spec.loss for link in topology.links} == {0.0}:
        return NO_LOSS
    return DROP_SIMULATOR if requested == "switch" else LINK_LOSS


@dataclass(frozen=True)
class JobSetup:
    """The SwitchML job of a simulated network (every host a worker, in rank order), or the
    jobs sharing its aggregating switch (``shared``: each its own hosts, slots and group)."""

    k: int
    pool_size: int
    max_pool_size: int
    job_id: int
    worker: Callable[[int], WorkerSetup | None]
    """host index (topology order) -> its worker's setup; None for a host in no job."""
    shared: tuple[SharedJob, ...] = ()


def ignore(frames: list[bytes]) -> None:
    """What a host that runs no worker does with the frames that reach it (a flooded one)."""


class SimulatedNetwork:
    """``topology`` with switches of ``target``'s data-plane contract, programmed for ``job``:
    ``data_plane``'s simulated switches (``target``'s own if it has them: the targets share
    one contract, docs/dataplane.md, so one target's simulated pipeline stands for another's)."""

    def __init__(self, topology: Topology, target: SwitchTarget, job: JobSetup, loss_mechanism: str = "auto", seed: int = 1,
                 link_burst_bytes: float = 0.0, data_plane: SwitchTarget | None = None, core: str = PYTHON_CORE) -> None:
        data_plane = data_plane or target
        if data_plane.simulated is None:
            raise SimulationUnsupported(f"switch target {data_plane.name} has no simulated data plane (SwitchTarget.simulated)")
        unshaped = [f"{link.a}-{link.b}" for link in topology.links if link.spec.bw_mbps is None]
        if unshaped:
            raise SimulationUnsupported(f"links without a rate cannot be simulated: {', '.join(unshaped)} (give bw_mbps)")
        self.env = simpy.Environment()
        self.topology = topology
        self._k = job.k
        self._target = target.name
        self._data_plane = data_plane.name
        self.loss_mechanism = loss_mechanism_of(topology, loss_mechanism)
        rng = random.Random(seed)
        self.switches: dict[str, SimulatedSwitch] = {
            s.name: data_plane.simulated(k=job.k, max_pool_size=job.max_pool_size, seed=rng.randrange(1 << 32)) for s in topology.switches
        }
        self.ports: dict[str, dict[str, int]] = {name: {} for name in self.switches}
        """switch -> neighbour -> the switch's port to it."""
        switch_endpoint = Endpoint(topology.aggregator_mac, topology.aggregator_ipv4, params.UDP_PORT_BASE)
        setups = [job.worker(index) for index in range(len(topology.hosts))]
        self.workers: dict[int, SimulatedWorker] = {
            index: SimulatedWorker(self.env, setup, Endpoint(host.mac, host.ipv4, params.WORKER_UDP_PORT), switch_endpoint)
            for index, (host, setup) in enumerate(zip(topology.hosts, setups)) if setup is not None
        }
        """host index -> its worker."""
        by_name = {topology.hosts[index].name: worker for index, worker in self.workers.items()}
        self.links: dict[tuple[str, str], Link] = {}
        """(from, to) -> that direction's link."""
        link_loss = self.loss_mechanism == LINK_LOSS
        arrivals = Arrivals(self.env)
        for link in topology.links:
            for a, b in ((link.a, link.b), (link.b, link.a)):
                if b in self.switches:
                    self.ports[b][a] = len(self.ports[b]) + 1
        for link in topology.links:
            spec = link.spec
            for a, b in ((link.a, link.b), (link.b, link.a)):
                deliver = self._switch_input(b, self.ports[b][a]) if b in self.switches else by_name[b].deliver if b in by_name else ignore
                self.links[a, b] = Link(self.env, arrivals, mbps_to_bps(spec.bw_mbps), spec.delay_ms / 1000, spec.queue_packets,
                                        spec.loss if link_loss else 0.0, random.Random(rng.randrange(1 << 32)), deliver,
                                        link_burst_bytes)
        for name, switch in self.switches.items():
            for neighbour, port in self.ports[name].items():
                switch.connect(port, self._transmit(self.links[name, neighbour]))
        for name, worker in by_name.items():
            worker.uplink = self.links[name, topology.neighbours(name)[0]]
        self.controls: dict[str, SwitchControl] = {name: switch.control() for name, switch in self.switches.items()}
        self.fabric = topology_fabric(topology, self._port_towards, {n: tuple(p.values()) for n, p in self.ports.items()},
                                      self.loss_mechanism == DROP_SIMULATOR)
        program_fabric(self.controls, self.fabric, Jobs(job.job_id, job.pool_size, job.max_pool_size, job.shared))
        self._native: NativeStar | None = None
        self.core = PYTHON_CORE
        """Which worker core and event loop run the network (WORKER_CORES)."""
        if core == NATIVE_CORE:
            problem = star_problem(len(self.switches), len(self.workers), len(topology.hosts), len(job.shared),
                                   self.loss_mechanism == DROP_SIMULATOR, max((s.packet_cost_s for s in setups if s is not None), default=0.0),
                                   all(has_aggregation_path(switch) for switch in self.switches.values()))
            if problem is not None:
                raise SimulationUnsupported(f"the native core runs a star of one job with loss on its links (simulation/native); "
                                            f"this network has {problem}")
            self._native = self._native_star()
            self.core = NATIVE_CORE
        elif core != PYTHON_CORE:
            raise ValueError(f"core must be one of {', '.join(WORKER_CORES)}, got {core!r}")

    def _native_star(self) -> NativeStar:
        """This star on star.c's loop (simulation/native/star.py)."""
        [(name, switch)] = self.switches.items()
        order = list(self.links)
        index = {pair: i for i, pair in enumerate(order)}
        hosts = {host.name: i for i, host in enumerate(self.topology.hosts)}
        destinations = [(TO_SWITCH, self.ports[b][a]) if b == name else (TO_WORKER, hosts[b]) if hosts.get(b) in self.workers
                        else (TO_NOBODY, 0) for a, b in order]
        workers = [self.workers[i] for i in range(len(self.topology.hosts))]
        uplinks = [index[host.name, name] for host in self.topology.hosts]
        ports = {port: index[name, neighbour] for neighbour, port in self.ports[name].items()}
        return NativeStar(switch, ports, [self.links[pair] for pair in order], destinations, workers, uplinks, self._k)

    @property
    def now(self) -> float:
        """The simulated clock."""
        return self.env.now if self._native is None else self._native.now

    def _port_towards(self, switch: str, node: str) -> int:
        return self.ports[switch][self.topology.next_hop(switch, node)]

    def _switch_input(self, switch: str, port: int) -> Deliver:
        receive = self.switches[switch].receive

        def deliver(frames: list[bytes]) -> None:
            for frame in frames:
                receive(port, frame)

        return deliver

    @staticmethod
    def _transmit(link: Link) -> Callable[[memoryview], None]:
        send = link.send
        return lambda frame: send(bytes(frame))

    @property
    def aggregating_controls(self) -> list[SwitchControl]:
        """The switches that hold aggregation state (Fabric.aggregating)."""
        return [self.controls[name] for name in self.fabric.aggregating()]

    def reset_aggregation(self) -> None:
        """Every aggregating switch's registers to zero (what a method's ``prepare`` asks of a network)."""
        for control in self.aggregating_controls:
            programming.reset_aggregation_state(control, self._k)

    def allreduce(self, tensors: Sequence[np.ndarray]) -> list[AllReduceResult]:
        """Every worker all-reduces its tensor (by host index), all released at the simulated
        now; runs the clock until the last has its result. SwitchMLTimeout when one misses its deadline."""
        if len(tensors) != len(self.workers):
            raise ValueError(f"{len(self.workers)} workers, {len(tensors)} tensors")
        return self.run_jobs([(range(len(tensors)), tensors, 0.0)])[0]

    def run_jobs(self, jobs: Sequence[tuple[Sequence[int], Sequence[np.ndarray], float]]) -> list[list[AllReduceResult]]:
        """Each job (its hosts by index, their tensors, its release after the simulated now)
        all-reduced by its workers; every job's results, by rank. SwitchMLTimeout when a worker
        misses its deadline."""
        for control in self.controls.values():
            programming.reset_event_counters(control)
        if self._native is not None:
            outcomes = [self._native_job(jobs)]
        else:
            outcomes = self._simpy_jobs(jobs)
        for outcome in (o for job in outcomes for o in job):
            if isinstance(outcome, SwitchMLTimeout):
                raise outcome
        return outcomes

    def _native_job(self, jobs: Sequence[tuple[Sequence[int], Sequence[np.ndarray], float]]) -> list[AllReduceResult | SwitchMLTimeout]:
        [(hosts, tensors, after_s)] = jobs
        if list(hosts) != list(range(len(self.workers))) or after_s:
            raise ValueError("the native core runs one all-reduce of every host, released at once (allreduce)")
        return self._native.allreduce(tensors)

    def _simpy_jobs(self, jobs: Sequence[tuple[Sequence[int], Sequence[np.ndarray], float]]) -> list[list[AllReduceResult | SwitchMLTimeout]]:
        env = self.env

        def released(worker: SimulatedWorker, tensor: np.ndarray, after_s: float) -> Generator[simpy.Event, object, object]:
            if after_s > 0:
                yield env.timeout(after_s)
            return (yield from worker.allreduce(tensor))

        processes = [[env.process(released(self.workers[host], tensor, after_s)) for host, tensor in zip(hosts, tensors)]
                     for hosts, tensors, after_s in jobs]
        env.run(env.all_of([process for job in processes for process in job]))
        return [[process.value for process in job] for job in processes]

    def event_counters(self) -> dict[str, dict[str, int]]:
        """Every switch's event counters since the last ``allreduce`` began, by counter name."""
        return {name: programming.read_event_counters(control) for name, control in self.controls.items()}

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
        }
