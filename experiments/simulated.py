"""The simulated clock behind the runner's network interface (``run_experiment.py --simulate``).

Every experiment kind runs its points on a ``PointNetwork`` (experiments/harness.py), which
its ``Clock`` builds: Mininet on the emulated clock, ``SimulatedPoint`` here, over a
``simulation.network.SimulatedNetwork``. A kind is written once and runs on either: the
same points, repetitions, worker specs, inputs, verification and results tables. What
differs is below the interface:

- **Workers.** A method's workers are its protocol's own (``Aggregation.core`` under the
  generic driver, or the protocol's own driver: simulation/host.py), built from the same
  worker spec the emulated hosts read. What each rank does around its all-reduces is the
  workload's rank program (hosts/rank.py: a given tensor, a training step), the one its
  host loop runs on an emulated host, here in this process (given inputs are handed over,
  never written). The methods the hosts compute among themselves
  (ring, PS, Gloo) are not simulated: their TAT is a model, recorded as such
  (``Clock.modelled``), never a row of runs.csv.
- **Time.** Released jobs run when their results are collected, each at its release's
  offset of simulated time; times in the results are simulated seconds, fidelity.csv stays
  empty (no process ran on a CPU), and summary.json says ``simulated: true`` with the
  models' parameters under ``simulation`` (docs/results-format.md, "Simulated runs").

What the simulated clock cannot run is refused before anything runs, in one line naming it
(``check_simulable``).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from base.plugin import resolve
import methods
from experiments.config import Experiment, Point
from experiments.servers import job_servers
from experiments.job_meter import JobMeasurement, counts_since
from experiments.limits import Limit
from experiments.results import ResultsWriter
from hosts.rank import RankProgram
from methods.aggregation import Aggregation, DataPath, DataPathUnavailable
from protocol.params import mbps_to_bps
from protocol.worker_spec import WorkerSpec
from simulation.host import start_host, start_server
from simulation.network import (DROP_SIMULATOR, NATIVE_CORE, NO_LOSS, PYTHON_CORE, JobSetup, LoopShape, NativeLoop, RankStarts,
                                SimulatedNetwork, SimulationUnsupported, loss_mechanism_of)
from switches.fabric import SharedJob, Station
from switches.targets import AUTO, lookup, root_run_targets, simulated_data_plane

log = logging.getLogger(__name__)

BASELINE_MODELS = "baseline_models"
"""summary.json ``simulation`` key: point -> method -> its model (``baseline_model``)."""
SIMPY_LOOP = "on the simulated clock (simulation/host.py's drivers, on SimPy)"
NATIVE_LOOP = "on the simulated clock ({loop}: the same events as on SimPy, in C)"
DEFAULT_SEED = 1
US = 1e-6


class SimulationFailed(RuntimeError):
    """A simulated job did not finish (a worker's deadline passed): the message says which slots waited."""


def simulated_target(requested: str, needs_delay_line: bool | None = False) -> str:
    """The switch target whose network a simulation of a config simulates: the one an
    emulated run of it takes on this machine (``auto`` resolved as run_experiment.py
    resolves it, so ``bw_mbps: target`` is that target's rate), or the one asked for, which
    need not be able to run here (the simulated switch needs nothing from the kernel). Its
    data plane is simulated by ``simulated_data_plane`` (switches/targets.py)."""
    if requested != AUTO:
        lookup(requested)
        return requested
    candidates = root_run_targets(AUTO, needs_delay_line)
    if len(candidates) > 1:
        log.info("--simulate: simulating %s's network, the first of %s that a root run could take", candidates[0], ", ".join(candidates))
    return candidates[0]


def in_network(point: Point) -> list[Aggregation]:
    """The protocols ``point``'s in-network methods run, each once."""
    return methods.aggregations_of(point.methods)


def check_simulable(experiment: Experiment) -> Experiment:
    """``experiment`` as the simulated clock runs it (each point's data path resolved for it),
    or SimulationUnsupported naming the first thing it lacks."""
    plane = simulated_data_plane(experiment.data["switch"]["target"])
    for point in experiment.points:
        where = f"{experiment.source}: point {point.index}"
        if point.cluster is not None:
            raise SimulationUnsupported(f"{where}: --simulate runs on this machine; remove the cluster section")
        protocols = in_network(point)
        if not protocols:
            raise SimulationUnsupported(f"{where}: --simulate runs the in-network methods and gives {', '.join(point.methods)} by their "
                                        f"models only beside them; add an in-network method to methods "
                                        f"({', '.join(m.name for m in methods.REGISTRY if m.aggregation is not None)})")
        for protocol in protocols:
            if not protocol.simulated:
                raise SimulationUnsupported(f"{where}: {protocol.label} has no worker on the simulated clock (its record names no core)")
            if protocol.simulated_host is None and float(experiment.data.get("simulation", {}).get("host_packet_cost_us", 0.0)):
                raise SimulationUnsupported(f"{where}: simulation.host_packet_cost_us: {protocol.label}'s worker core runs on an ideal "
                                            "host (the generic driver, simulation/host.py, models no cost per packet)")
            if protocol.name not in plane.protocols:
                raise SimulationUnsupported(f"{where}: {plane.name}'s simulated data plane has no program for {protocol.label}")
        if point.workload_kind.rank_program is None:
            raise SimulationUnsupported(f"{where}: workload {point.workload['kind']}'s hosts run a loop of their own "
                                        "(its record names no rank_program), which only emulation runs")
    return experiment.with_data_paths({point.index: {protocol.name: simulated_data_path(experiment, point, protocol) for protocol in in_network(point)}
                                       for point in experiment.points})


def native_loop(protocol: Aggregation) -> NativeLoop | None:
    """``protocol``'s compiled event loop for the simulated clock (its record's ``simulated_loop``), if it has one."""
    return None if protocol.simulated_loop is None else resolve(protocol.simulated_loop)


def simulated_data_path(experiment: Experiment, point: Point, protocol: Aggregation) -> DataPath:
    """Which worker loop simulates ``protocol``'s jobs at ``point``: its native core on its
    compiled loop (its record's ``simulated_loop``) where the config's ``protocol.data_path``
    allows it (``auto``: where it builds) and the loop runs the network's shape
    (``NativeLoop.problem``), else its core on SimPy, with the reason."""
    simpy = DataPath(PYTHON_CORE, f"{protocol.label}'s worker core {SIMPY_LOOP}")
    choice = point.protocol["data_path"]
    if choice == "python":
        return replace(simpy, reason=f"{simpy.reason}: protocol.data_path: python")
    loop = native_loop(protocol)
    if loop is None:
        if choice == "native":
            raise SimulationUnsupported(f"{experiment.source}: point {point.index}: protocol.data_path: native: {protocol.label} has "
                                        "no native core on the simulated clock (its record names no simulated_loop)")
        return replace(simpy, reason=f"{simpy.reason}: {protocol.label} has no native core on the simulated clock")
    topology = point.topology
    plane = simulated_data_plane(experiment.data["switch"]["target"])
    switch = plane.simulated(k=point.job.k, max_pool_size=point.job.pool_size, seed=0, protocol=protocol.name)
    shape = LoopShape(len(topology.switches), len(topology.hosts), len(topology.hosts), len(point.data.get("jobs") or ()),
                      loss_mechanism_of(topology, point.data["loss_mechanism"]) == DROP_SIMULATOR,
                      float(experiment.data.get("simulation", {}).get("host_packet_cost_us", 0.0)) * US)
    problem = loop.problem(shape, switch)
    record = simulation_record(experiment)
    if not rank_starts(record).together:
        problem = problem or "simulation.rank_start_skew_us or rank_start_jitter_us (its loop releases every rank at once)"
    if record["switch_packet_cost_us"]:
        problem = problem or "simulation.switch_packet_cost_us (its switch processes every frame at its arrival)"
    try:
        loop.build()
    except DataPathUnavailable as exc:
        problem = problem or str(exc)
    if problem is None:
        return DataPath(NATIVE_CORE, f"{protocol.label}'s native worker core {NATIVE_LOOP.format(loop=loop.name)}")
    if choice == "native":
        raise SimulationUnsupported(f"{experiment.source}: point {point.index}: protocol.data_path: native: the native core is "
                                    f"simulated for {loop.scope} only; this one has {problem}")
    return replace(simpy, reason=f"{simpy.reason}: the native core's loop does not take {problem}")


def simulation_record(experiment: Experiment) -> dict[str, Any]:
    """summary.json's ``simulation``: what the simulated network models and with which parameters."""
    section = experiment.data.get("simulation", {})
    return {
        "engine": "simpy",
        "clock": "simulated seconds (tat_s, timeline t_ms)",
        "switch": "the target's data-plane contract (docs/dataplane.md) as its own simulated data plane or, for a target without "
                  "one, the first target's that has one (network.json: data_plane), processing every frame at its arrival",
        "worker": "per point, summary.json's data_path: the native core on star.c's loop, or the protocol's core on SimPy",
        "link": "drop-tail FIFO per direction: serialization of the frame's bytes (no preamble, FCS or gap) at the link "
                "rate (after htb's token bucket of link_burst_bytes when not 0: a frame leaves while the bucket is out of debt), "
                "then the link's delay; loss independent per frame",
        "host_packet_cost_us": float(section.get("host_packet_cost_us", 0.0)),
        "server_packet_cost_us": float(section.get("server_packet_cost_us", 0.0)),
        "switch_packet_cost_us": float(section.get("switch_packet_cost_us", 0.0)),
        "worker_holds": bool(section.get("worker_holds", False)),
        "rank_start_skew_us": float(section.get("rank_start_skew_us", 0.0)),
        "rank_start_jitter_us": float(section.get("rank_start_jitter_us", 0.0)),
        "link_burst_bytes": float(section.get("link_burst_bytes", 0.0)),
        "seed": int(section.get("seed", DEFAULT_SEED)),
        "baseline_efficiency": float(section.get("baseline_efficiency", 1.0)),
        "baseline_model": "TAT = elements / (the method's line-rate bound (methods/) x baseline_efficiency): a model, not a "
                          "simulation; not in runs.csv",
        BASELINE_MODELS: {},
    }


def rank_starts(record: dict[str, Any]) -> RankStarts:
    """When a job's ranks start, from the ``simulation`` record's parameters."""
    return RankStarts(record["rank_start_skew_us"] * US, record["rank_start_jitter_us"] * US)


def baseline_model(point: Point, method: str, efficiency: float) -> dict[str, float | str]:
    """``method``'s TAT at ``point`` by its line-rate bound and ``efficiency``, labelled as a model."""
    n = len(point.topology.hosts)
    bound = methods.by_name(method).bound(mbps_to_bps(point.topology.link_mbps), n, point.job.k)
    ate = bound * efficiency
    return {"model": "line-rate bound x efficiency", "efficiency": efficiency, "bound_ate_per_s": bound, "ate_per_s": ate,
            "tat_s": point.workload_info.elements / ate}


def point_simulation(experiment: Experiment, point: Point, target: str, method: str, jobs: Sequence[SharedJob] = ()) -> SimulatedNetwork:
    """``point``'s network on the simulated clock for ``method``'s protocol, with no worker
    attached yet: its switches running the protocol's program, programmed for the point's
    job (or ``jobs`` sharing the aggregating switch) by the protocol's record."""
    protocol = methods.by_name(method).aggregation
    record = simulation_record(experiment)
    job = point.job
    native = native_loop(protocol) if point.data_path_of(protocol).name == NATIVE_CORE and not jobs else None
    return SimulatedNetwork(point.topology, lookup(target), JobSetup(job.k, job.pool_size, experiment.data["switch"]["max_pool_size"],
                                                                      job.job_id, shared=tuple(jobs)),
                            point.data["loss_mechanism"], record["seed"], record["link_burst_bytes"], simulated_data_plane(target), native,
                            protocol=protocol, servers=job_servers(point, method), switch_packet_cost_s=record["switch_packet_cost_us"] * US)


def attach_workers(net: SimulatedNetwork, spec: WorkerSpec, host_indices: Sequence[int] | None = None,
                   packet_cost_s: float = 0.0, server_cost_s: float = 0.0, holds: bool = False) -> list[int]:
    """The spec's workers on ``net``'s hosts at ``host_indices`` (default: every host, rank
    order), each built from the spec as its host builds it (simulation/host.py), and the job's
    servers (the spec's ``servers``) on the hosts the network cabled for them; the indices.
    ``holds``: the workers hold as their socket loops do (``simulation.worker_holds``)."""
    hosts = net.topology.hosts
    indices = list(range(len(hosts))) if host_indices is None else list(host_indices)
    stations = {station.ipv4: station for station in net.servers.values()}
    for index, address in enumerate(spec.servers):
        station = stations[address]
        net.attach_server(station.name, start_server(net.env, spec, index, station, net.switch_station, server_cost_s))
    for rank, index in enumerate(indices):
        host = hosts[index]
        net.attach(index, start_host(net.env, spec, rank, Station(host.name, host.mac, host.ipv4), net.switch_station,
                                     packet_cost_s, holds))
    return indices


class SimulatedClock:
    """The simulated clock: a ``SimulatedPoint`` per point, the baselines by their models."""

    simulated = True

    def __init__(self, experiment: Experiment, target: str) -> None:
        self.target = target
        self.record = simulation_record(experiment)

    def begin(self, writer: ResultsWriter) -> None:
        writer.mark_simulated(self.record)

    def modelled(self, point: Point, writer: ResultsWriter) -> list[str]:
        """The methods of ``point`` given by their model (those that run on no switch),
        recorded in summary.json's ``simulation``."""
        efficiency = self.record["baseline_efficiency"]
        models = {m: baseline_model(point, m, efficiency) for m in point.methods if methods.by_name(m).aggregation is None}
        if models:
            self.record[BASELINE_MODELS][str(point.index)] = models
            writer.mark_simulated(self.record)
            for method, model in models.items():
                log.info("point %d %s: %.6g s per all-reduce by its model (%s, efficiency %g)", point.index, method, model["tat_s"],
                         model["model"], model["efficiency"])
        return list(models)

    def note(self, writer: ResultsWriter, key: str, text: str) -> None:
        self.record[key] = text
        writer.mark_simulated(self.record)

    @contextlib.contextmanager
    def point(self, experiment: Experiment, point: Point, writer: ResultsWriter, jobs: Sequence[SharedJob] = ()) -> Iterator[SimulatedPoint]:
        work = writer.work_dir / f"point{point.index}"
        work.mkdir(parents=True, exist_ok=True)
        try:
            yield SimulatedPoint(self, experiment, point, writer, tuple(jobs), work)
        finally:
            shutil.rmtree(writer.work_dir, ignore_errors=True)


class SimulatedPoint:
    """One point's network on the simulated clock (harness.py's ``PointNetwork``): a fresh
    ``SimulatedNetwork`` for each method, as its first job finds the emulated switch reset."""

    def __init__(self, clock: SimulatedClock, experiment: Experiment, point: Point, writer: ResultsWriter, jobs: tuple[SharedJob, ...],
                 work: Path) -> None:
        self.clock = clock
        self.experiment = experiment
        self.point = point
        self.writer = writer
        self.jobs = jobs
        self.work = work
        self._inputs: dict[str, np.ndarray] = {}
        self._net: SimulatedNetwork | None = None
        self._method: str | None = None
        self._released: list[tuple[SimulatedWorkers, int, float]] = []

    @property
    def net(self) -> SimulatedNetwork:
        if self._net is None:
            raise RuntimeError("no method has been prepared on this point's simulated network")
        return self._net

    @property
    def loss_mechanism(self) -> str:
        return loss_mechanism_of(self.point.topology, self.point.data["loss_mechanism"])

    @property
    def repeats_jobs_exactly(self) -> bool:
        """On lossless links with no rank's start drawn (``rank_start_jitter_us``): the
        simulation draws no random number then (within 1.2 % for a network's first job, which
        finds it fresh; tests/test_training_step.py)."""
        return self.loss_mechanism == NO_LOSS and not self.clock.record["rank_start_jitter_us"]

    def write_inputs(self, tensors: Sequence[np.ndarray], folder: Path | None = None) -> tuple[str, ...]:
        """Each rank's tensor under the name an emulated run would write it to, handed to the
        simulated hosts in this process rather than written."""
        names = tuple(str((folder or self.work) / f"input-rank{rank}.npy") for rank in range(len(tensors)))
        self._inputs.update(zip(names, tensors))
        return names

    def _network(self, method: str) -> SimulatedNetwork:
        if self._method != method:
            self._net = point_simulation(self.experiment, self.point, self.clock.target, method, self.jobs)
            self._method = method
            self.writer.record_network(self.point.index, self._net.describe())
        return self.net

    def prepare(self, method: str) -> None:
        methods.by_name(method).prepare(self._network(method), self.point.protocol)

    @contextlib.contextmanager
    def workers(self, method: str, spec_path: Path, host_indices: Sequence[int] | None = None) -> Iterator[SimulatedWorkers]:
        """The spec's workers on the hosts at ``host_indices`` (default: all), attached to the
        method's network, each built from the spec as its host would build it."""
        spec = WorkerSpec.read(spec_path)
        record = self.clock.record
        indices = attach_workers(self._network(method), spec, host_indices, record["host_packet_cost_us"] * US,
                                 record["server_packet_cost_us"] * US, record["worker_holds"])
        program = resolve(self.point.workload_kind.rank_program)
        yield SimulatedWorkers(self, method, [program(spec, rank, self._inputs.__getitem__) for rank in range(len(indices))], indices)

    def release_together(self, groups: Sequence[SimulatedWorkers], repetition: int, offsets_s: Sequence[float]) -> list[float]:
        """Each group released at its offset of simulated time after the first: the offsets."""
        for group, offset in zip(groups, offsets_s):
            self._released.append((group, repetition, offset))
        return list(offsets_s)

    def run_released(self) -> None:
        """Every released group's all-reduce, on the clock at once; their reports handed to them."""
        released, self._released = self._released, []
        net, point = self.net, self.point
        began = time.perf_counter()
        try:
            outcomes = net.run_jobs([(group.hosts, [program.tensor(repetition) for program in group.programs], offset)
                                     for group, repetition, offset in released], reset_counters=False,  # the meter's
                                    starts=rank_starts(self.clock.record))
        except TimeoutError as exc:  # a worker's deadline passed (SwitchML: hosts/switchml/job.py's SwitchMLTimeout)
            _, repetition, _ = released[0]
            raise SimulationFailed(f"point {point.index} {self._method} rep {repetition} (simulated): {exc}") from None
        for (group, repetition, _), results in zip(released, outcomes):
            group.reports = [program.done(repetition, result.values, result.int_sum, result.stats)
                             for program, result in zip(group.programs, results)]
        log.info("point %d %s rep %d: %.6g simulated s in %.2f s of wall time", point.index, self._method, released[0][1],
                 max(r.stats.tat_s for results in outcomes for r in results), time.perf_counter() - began)

    def meter(self, group: SimulatedWorkers) -> SimulatedMeter:
        return SimulatedMeter(self)

    def job_limit(self, method: str) -> Limit:
        return self.point.job_limit(method)

    def explain_wrong_sums(self, method: str, measured: JobMeasurement, reports: Sequence[Any], verdicts: Sequence[Any]) -> None:
        """Nothing to add: a simulated switch's registers change only by its frames (the
        verifier's own lines say which rank's sums are wrong)."""


class SimulatedWorkers:
    """One method's workers on a simulated point (harness.py's ``Workers``): each rank's
    program (the workload's ``rank_program``, hosts/rank.py) around its simulated worker."""

    def __init__(self, point: SimulatedPoint, method: str, programs: list[RankProgram], hosts: list[int]) -> None:
        self._point = point
        self.method = method
        self.programs = programs
        self.hosts = hosts
        self.reports: list[dict[str, Any]] | None = None

    def release(self, repetition: int) -> None:
        self._point.release_together([self], repetition, [0.0])

    def collect(self, event: str, limit: Limit, grace_s: float = 0.0) -> list[dict[str, Any]]:
        """The reports of the last release, running the clock for every group released with it."""
        if self.reports is None:
            self._point.run_released()
        reports, self.reports = self.reports, None
        return reports

    def finish(self) -> None:
        """Nothing runs between releases."""


class SimulatedMeter:
    """A job's measurement on the simulated clock: its simulated duration, the switches' event
    counters and its servers' counts (no CPU, no transmit rates: nothing ran on one)."""

    def __init__(self, point: SimulatedPoint) -> None:
        self._point = point
        self._started = 0.0
        self._servers_before: list[dict[str, int]] = []

    def _servers(self) -> list[dict[str, int]]:
        return [dict(server.core.stats()) for server in self._point.net.server_hosts.values()]

    def start(self) -> None:
        self._point.net.reset_counters()
        self._started = self._point.net.now
        self._servers_before = self._servers()  # a server's counts run on over the job's repetitions

    def stop(self) -> JobMeasurement:
        net = self._point.net
        return JobMeasurement(cpu={}, wall_s=net.now - self._started, tx_mbps={}, counters=net.event_counters(), frames={},
                              servers=counts_since(self._servers_before, self._servers()))
