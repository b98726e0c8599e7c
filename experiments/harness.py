"""The run skeleton every experiment kind is built on: a point's network and work folder,
its workers, and the verification of what they return, on either clock.

A kind (``ExperimentKind``, registered in experiments/kinds/__init__.py) says only what is its own:
when a config is of that kind, which jobs it runs on the network and in what order, which
rows it records, and what it prints. What every kind does the same way is here, once:

- ``worker_spec``: what every worker of a method is told;
- ``PointNetwork``: the one interface a kind runs its jobs through, whichever the clock:
  prepare a method, start its workers on the workload (``workers``), release and collect
  them, meter a job, and the network's description in network.json. Its two implementations
  are ``EmulatedPoint`` (below: Mininet, worker processes) and experiments/simulated.py's
  ``SimulatedPoint``; a ``Clock`` builds them (``point_network``), so no kind has a second
  runner for the simulated clock;
- ``EmulatedPoint``: the emulated network of one point, held for the point's jobs, with a
  work folder for inputs and results that lives exactly as long as the network (removed
  afterwards whatever happens, and by the next run if this one is killed: tensors can be
  large); its ``workers`` are one process per host, started and watched, with the switches
  and the nodes' shells as the dependencies whose death fails the wait at once;
- ``verify_reports``: every worker's result against the expected sum, logged per rank when
  wrong, its files removed once read.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Mapping, Protocol, Sequence

import numpy as np

from experiments.config import Experiment, Point
from experiments.job_meter import JobMeasurement, JobMeter
from experiments.results import ResultsWriter
from methods.verification import Expected, Verdict
from experiments.limits import Limit
from experiments.workers import RESULT_FILES, WorkerGroup
import methods
from methods.aggregation import Job
from network.evidence import aggregation_evidence
from protocol.worker_spec import WorkerSpec, job_section
from experiments.servers import job_servers
from switches.fabric import SharedJob, jobs_sharing

if TYPE_CHECKING:  # Mininet's; imported where a network is built, so that --simulate runs without Mininet installed
    from network.emulation import EmulatedNetwork

log = logging.getLogger(__name__)

BASELINE_PORT = 47000
"""TCP port the ring and parameter-server ranks listen on."""


def worker_spec(point: Point, method: str, job_id: int | None = None) -> WorkerSpec:
    """What every worker process of a method needs (hosts/worker.py), for the point's job or,
    among several sharing the switch, job ``job_id`` (its ``servers``)."""
    topology = point.topology
    servers = job_servers(point, method).get(point.job.job_id if job_id is None else job_id, ())
    return WorkerSpec(
        method=method,
        n_workers=len(topology.hosts),
        switch_ipv4=topology.aggregator_ipv4,
        link_mbps=topology.link_mbps,
        protocol=job_parameters(point, method),
        peers=tuple((h.ipv4, BASELINE_PORT) for h in topology.hosts),
        job_timeout_s=point.job_limit(method).seconds,
        connect_timeout_s=point.limits.worker_start_s,
        serve=point.workload_kind.host,
        servers=tuple(station.ipv4 for station in servers),
    )


def job_parameters(point: Point, method: str) -> dict[str, Any] | None:
    """The switch job's parameters of ``method`` at ``point``, as its protocol's record gives
    them (methods/aggregation.py; the data path resolved only for a method that has one),
    for its workers' spec; None for a method with no switch job."""
    registered = methods.by_name(method)
    if registered.aggregation is None:
        return None
    return job_section(registered.job_parameters(point.protocol, point.data_path_of(registered.aggregation).name))


class KindRunner(Protocol):
    def run(self) -> bool:
        """Run everything not already in the results; True when every result verified."""


class Workers(Protocol):
    """One method's workers on a point's hosts, started and ready."""

    def release(self, repetition: int) -> None:
        """Let every rank start ``repetition`` (a step, for a training)."""

    def collect(self, event: str, limit: Limit, grace_s: float = 0.0) -> list[dict[str, Any]]:
        """Every rank's ``event`` report (hosts/worker.py's 'done': stats, result, int_sum), by rank."""

    def finish(self) -> None:
        """Every rank told to exit, and gone."""


class Meter(Protocol):
    def start(self) -> None: ...

    def stop(self) -> JobMeasurement: ...


class PointNetwork(Protocol):
    """One point's network while it is held, on either clock: what every kind runs its jobs through."""

    point: Point
    work: Path
    """The point's work folder (worker specs, inputs and results); exists while the network does."""

    @property
    def loss_mechanism(self) -> str:
        """How the links' loss is made (network.json's ``loss_mechanism``), for the results' rows."""

    @property
    def repeats_jobs_exactly(self) -> bool:
        """Whether a job of the same size run again here, on its own, takes the time it took
        (the simulated clock on lossless links: nothing random, nothing else running), so that
        a kind may record it from its first run rather than run it again."""

    def write_inputs(self, tensors: Sequence[np.ndarray], folder: Path | None = None) -> tuple[str, ...]:
        """Each rank's input tensor for a worker spec's ``inputs`` (in ``folder``, default the work folder)."""

    def prepare(self, method: str) -> None:
        """What ``method``'s record says the network needs before its first job here."""

    def workers(self, method: str, spec_path: Path, host_indices: Sequence[int] | None = None) -> ContextManager[Workers]:
        """The spec's workers on every host (or those at ``host_indices``), started; gone on the way out."""

    def release_together(self, groups: Sequence[Workers], repetition: int, offsets_s: Sequence[float]) -> list[float]:
        """Each group released at its offset (s) after the first; the offsets they were released at."""

    def meter(self, group: Workers) -> Meter:
        """What one of ``group``'s jobs cost: switch counters, time, and (emulated) CPU and rates."""

    def job_limit(self, method: str) -> Limit:
        """How long the runner waits for one of ``method``'s all-reduces (Point.job_limit)."""

    def explain_wrong_sums(self, method: str, measured: JobMeasurement, reports: Sequence[Mapping[str, Any]],
                           verdicts: Sequence[Verdict]) -> None:
        """After a job whose sums came back wrong: log what the network shows of the cause."""


class Clock(Protocol):
    """Emulated or simulated: builds each point's network, and says which methods it gives by a model."""

    target: str
    """The switch target whose network it runs (its rate and data-plane contract)."""
    simulated: bool

    def begin(self, writer: ResultsWriter) -> None:
        """Mark the results as this clock's, before the first point."""

    def modelled(self, point: Point, writer: ResultsWriter) -> list[str]:
        """The methods of ``point`` this clock gives by a model rather than runs, recorded in the results."""

    def note(self, writer: ResultsWriter, key: str, text: str) -> None:
        """``text`` recorded under ``key`` beside the clock's models (summary.json's
        ``simulation``): how a kind ran its jobs on it. The emulated clock has no models to note."""

    def point(self, experiment: Experiment, point: Point, writer: ResultsWriter, jobs: Sequence[SharedJob] = ()) -> ContextManager[PointNetwork]:
        """``point``'s network, recorded in the results and held with its work folder."""


@dataclass(frozen=True)
class ExperimentKind:
    """One kind of experiment: the plug-in run_experiment.py drives without knowing which."""

    name: str
    """What a workload record names as its ``experiment`` (workloads/kinds/)."""
    writer: Callable[[Path, Experiment, str], ResultsWriter]
    """(run folder, experiment, switch target) -> the results writer."""
    runner: Callable[[Experiment, Clock, Any, Callable[[str], None]], KindRunner]
    """(experiment, clock, writer, progress) -> what runs it, on either clock; progress(what)
    per unit done."""
    unit: str
    """What one step of the progress bar is (job, step, repetition)."""
    units: Callable[[Experiment], int]
    """How many units the whole run has."""
    report: Callable[[dict[str, Any]], str]
    """The table printed from the finished run's summary."""
    emulated_only: bool = False
    """Its hosts run real PyTorch processes (DDP), which the simulated clock has no model of:
    run_experiment.py --simulate refuses it in one line."""
    applies: Callable[[Experiment], bool] | None = None
    """Whether a loaded config is of this kind whatever its workload (several jobs on one
    switch), asked before the workload's own kind; None: only when the workload names it."""
    check: Callable[[Experiment], None] = lambda experiment: None
    """The rules of this kind that span keys (the shared-switch kind's jobs), asked once a
    config of this kind has loaded (``experiments.kinds.load``): a ConfigError naming the point
    and the key. Rules every kind shares stay in experiments/config.py."""


@dataclass(frozen=True)
class EmulatedPoint:
    """One point's emulated network while it is held, with the point's work and log folders (a ``PointNetwork``)."""

    net: EmulatedNetwork
    point: Point
    work: Path
    """Inputs and workers' results; exists while the network does."""
    log_dir: Path

    @property
    def loss_mechanism(self) -> str:
        return self.net.report.loss_mechanism

    @property
    def repeats_jobs_exactly(self) -> bool:
        """Never: real processes on a real CPU."""
        return False

    def write_inputs(self, tensors: Sequence[np.ndarray], folder: Path | None = None) -> tuple[str, ...]:
        """One .npy per rank in ``folder`` (default: the work folder); their paths, by rank."""
        folder = folder or self.work
        paths = []
        for rank, tensor in enumerate(tensors):
            path = folder / f"input-rank{rank}.npy"
            np.save(path, tensor)
            paths.append(str(path))
        return tuple(paths)

    def prepare(self, method: str) -> None:
        """What ``method``'s record says the network needs before its first job here."""
        self.net.prepare(methods.by_name(method))

    @contextlib.contextmanager
    def workers(self, method: str, spec_path: Path, host_indices: Sequence[int] | None = None) -> Iterator[WorkerGroup]:
        """One worker per host (all of the topology's, or those at ``host_indices``), started
        and ready; killed on the way out unless finished. An error inside becomes
        DependencyExited when a switch, its learning thread or a node's shell died meanwhile: that is its cause."""
        hosts = self.point.topology.hosts
        chosen = [hosts[i] for i in host_indices] if host_indices is not None else list(hosts)
        with self._serving(method, spec_path, [h.name for h in chosen]), WorkerGroup(method, [self.net.host(h.name) for h in chosen], spec_path, self.log_dir,
                         self.point.limits.limit("worker_exit_s"),
                         dependencies=self.net.dependencies(),
                         remote_shells=self.net.remote_host_shells(), waited_for=self.net.waited_for,
                         switch_problems=self.net.switch_problems) as group, \
                group.dependencies_checked():
            group.start(self.point.limits.limit("worker_start_s"))
            yield group

    def _serving(self, method: str, spec_path: Path, hosts: Sequence[str]) -> ContextManager[Any]:
        """The servers of the job on ``hosts`` (its protocol's ``server``, network/servers.py),
        started with its workers' spec before they are; nothing for a method whose jobs need none."""
        aggregation = methods.by_name(method).aggregation
        if aggregation is None or not aggregation.servers_per_job:
            return contextlib.nullcontext()
        index = self.net.job_index(hosts)
        if index is None:
            raise ValueError(f"method {method}: no job of {aggregation.label} runs on hosts {', '.join(hosts)}")
        return self.net.serving({index: spec_path})

    @staticmethod
    def release_together(groups: Sequence[WorkerGroup], repetition: int, offsets_s: Sequence[float]) -> list[float]:
        """Release each group at its offset after the first (wall time); the times it was released at."""
        t0 = time.monotonic()
        released = []
        for group, offset in zip(groups, offsets_s):
            delay = t0 + offset - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            released.append(time.monotonic() - t0)
            group.release(repetition)
        return released

    def explain_wrong_sums(self, method: str, measured: JobMeasurement, reports: Sequence[Mapping[str, Any]],
                           verdicts: Sequence[Verdict]) -> None:
        """After a SwitchML job whose sums came back wrong, log what points at the switch,
        where one switch aggregated one job (the verifier only says the sums are wrong): its
        counters (network/evidence.py: ``aggregation_evidence``), and every rank holding the
        same wrong integer sum -- what the switch multicast, not what a worker made of it."""
        net = self.net
        if method != methods.SWITCHML.name or net.fabric is None or net.fabric.hierarchical or len(net.jobs) > 1 or not reports:
            return
        switch = net.fabric.aggregator.name
        stats = reports[0]["stats"]
        found = [aggregation_evidence(measured.counters.get(switch, {}), switch, len(reports), stats["packets_sent"] - stats["retransmissions"])]
        details = {verdict.detail for verdict in verdicts}
        if not any(verdict.verified for verdict in verdicts) and len(details) == 1 and details.pop().startswith("integer sum: "):
            found.append(f"every rank got the same wrong integer sum ({verdicts[0].detail.removeprefix('integer sum: ')}): switch {switch} "
                         "multicast a wrong aggregate; its registers changed under the job (reset or written from outside it, as through "
                         "its control-plane CLI) or its program is wrong")
        if any(found):
            log.error("the likely cause: %s", "; ".join(f for f in found if f))

    def meter(self, group: WorkerGroup) -> JobMeter:
        """A meter over the switches and ``group``'s workers (by host name)."""
        workers = {host.name: (self.net.server_of(host.name), pid) for host, pid in zip(group.hosts, group.pids_on_servers)}
        return JobMeter(self.net, workers | self.net.measured_switch_processes())

    def job_limit(self, method: str) -> Limit:
        """How long the runner waits for one of ``method``'s all-reduces (Point.job_limit)."""
        return self.point.job_limit(method)


class EmulatedClock:
    """The emulated clock: Mininet, a worker process per host; every method runs."""

    simulated = False

    def __init__(self, experiment: Experiment, target: str) -> None:
        self.target = target

    def begin(self, writer: ResultsWriter) -> None:
        """Nothing to mark: results are emulated unless said otherwise."""

    def modelled(self, point: Point, writer: ResultsWriter) -> list[str]:
        return []

    def note(self, writer: ResultsWriter, key: str, text: str) -> None:
        """Nothing to note beside: emulated results record no models."""

    @contextlib.contextmanager
    def point(self, experiment: Experiment, point: Point, writer: ResultsWriter, jobs: Sequence[SharedJob] = ()) -> Iterator[EmulatedPoint]:
        """Build ``point``'s network, record it in the results, hold it with its work folder."""
        from network.emulation import EmulatedNetwork

        log_dir = writer.log_dir / f"point{point.index}"
        with EmulatedNetwork(
            point.topology,
            self.target,
            log_dir,
            k=point.job.k,
            max_pool_size=experiment.data["switch"]["max_pool_size"],
            jobs=network_jobs(point, jobs),
            loss_mechanism=point.data["loss_mechanism"],
            tcp_congestion_control=point.data["tcp_congestion_control"],
            cluster=point.cluster,
        ) as net:
            net.declare_directory(writer.work_dir)
            work = writer.work_dir / f"point{point.index}"
            work.mkdir(parents=True, exist_ok=True)
            try:
                writer.record_network(point.index, net.describe())
                yield EmulatedPoint(net, point, work, log_dir)
            finally:
                shutil.rmtree(writer.work_dir, ignore_errors=True)


def point_network(experiment: Experiment, point: Point, clock: Clock, writer: ResultsWriter,
                  jobs: Sequence[SharedJob] = ()) -> ContextManager[PointNetwork]:
    """``point``'s network on ``clock``, recorded in the results and held with its work folder."""
    return clock.point(experiment, point, writer, jobs)


def clock_of(experiment: Experiment, target: str, simulate: bool) -> Clock:
    """The clock a run takes: ``--simulate``'s (experiments/simulated.py) or Mininet's."""
    if simulate:
        from experiments.simulated import SimulatedClock

        return SimulatedClock(experiment, target)
    return EmulatedClock(experiment, target)


def network_jobs(point: Point, shared: Sequence[SharedJob] = ()) -> list[Job]:
    """The in-network jobs of every protocol ``point``'s methods run, as its network takes
    them: one of every host, or the ``shared`` ones, each with its protocol's parameters."""
    hosts = tuple(h.name for h in point.topology.hosts)
    return [Job(aggregation, job.parameters, job.hosts) for aggregation in methods.aggregations_of(point.methods)
            for job in jobs_sharing(aggregation.parameters(point.protocol, point.data_path_of(aggregation).name), hosts, shared)]


def take_result(report: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """A report's result values and the switch's integer sum (None for the baselines), its
    files removed once read (a simulated worker's report holds the arrays themselves)."""
    values = read_array(report["result"])
    int_sum = read_array(report["int_sum"]) if "int_sum" in report else None
    for key in RESULT_FILES:
        if key in report and not isinstance(report[key], np.ndarray):
            Path(report[key]).unlink()
    return values, int_sum


def read_array(found: str | np.ndarray) -> np.ndarray:
    """A report's array: the file a worker process wrote, or the array a simulated worker handed over."""
    return found if isinstance(found, np.ndarray) else np.load(found)


def verify_reports(method: str, expected: Expected, reports: Sequence[Mapping[str, Any]], what: str) -> list[Verdict]:
    """Every rank's result verified; a wrong one logged as '<what> rank R: NOT VERIFIED'."""
    return verify_results(method, expected, [take_result(report) for report in reports], what)


def verify_results(method: str, expected: Expected, results: Sequence[tuple[np.ndarray, np.ndarray | None]], what: str) -> list[Verdict]:
    """Each rank's (values, integer sum or None) verified by ``method``'s check; a wrong one
    logged as '<what> rank R: NOT VERIFIED' (workers' reports: ``verify_reports``; a
    simulation's results, which never were files)."""
    verdicts = []
    for rank, (values, int_sum) in enumerate(results):
        verdict = methods.by_name(method).verify(expected, values, int_sum)
        if not verdict.verified:
            log.error("%s rank %d: NOT VERIFIED: %s", what, rank, verdict.detail)
        verdicts.append(verdict)
    return verdicts


def pending_methods(writer: ResultsWriter, point: Point, progress: Callable[[str], None], methods_run: Sequence[str],
                    units: int | None = None) -> list[str]:
    """Of ``methods_run`` at ``point``, those still to run: one with all its ``units`` in the
    results already (default: the point's repetitions; ``--resume``) is skipped, its units
    reported done; an interrupted one has its rows discarded, to run again whole."""
    units = point.repetitions if units is None else units
    pending = []
    for method in methods_run:
        if writer.has_rows(point.index, method, units):
            log.info("point %d %s: already in %s, skipped (resume)", point.index, method, writer.run_dir)
            for _ in range(units):
                progress("skipped")
        else:
            writer.discard(point.index, method)
            pending.append(method)
    return pending


class PointRunner:
    """A kind's runner that takes the points one by one: at each, the clock's modelled methods
    are reported done, the ones already in the results skipped (``--resume``), and the rest run
    on one network by ``run_point``, the kind's own part."""

    def __init__(self, experiment: Experiment, clock: Clock, writer: ResultsWriter, progress: Callable[[str], None]) -> None:
        self.experiment = experiment
        self.clock = clock
        self.writer = writer
        self.progress = progress

    def units(self, point: Point) -> int:
        """How many result rows one method makes at ``point``: its repetitions by default."""
        return point.repetitions

    def run(self) -> bool:
        """Run every point not already in the results; True when every result verified."""
        verified = True
        for point in self.experiment.points:
            units = self.units(point)
            modelled = self.clock.modelled(point, self.writer)
            for method in modelled:
                for _ in range(units):
                    self.progress(f"{method} (model)")
            pending = pending_methods(self.writer, point, self.progress, [m for m in point.methods if m not in modelled], units)
            if pending:
                verified &= self.run_point(point, pending)
        return verified

    def run_point(self, point: Point, methods_left: list[str]) -> bool:
        """Run ``methods_left`` at ``point``; True when every result verified."""
        raise NotImplementedError
