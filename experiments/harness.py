"""The run skeleton every experiment kind is built on: a point's network and work folder,
its workers, and the verification of what they return.

A kind (``ExperimentKind``, registered in experiments/kinds/__init__.py) says only what is its own:
when a config is of that kind, which jobs it runs on the network and in what order, which
rows it records, and what it prints. What every kind does the same way is here, once:

- ``worker_spec``: what every worker process of a method is told;
- ``point_network``: the emulated network of one point, held for the point's jobs, with a
  work folder for inputs and results that lives exactly as long as the network (removed
  afterwards whatever happens, and by the next run if this one is killed: tensors can be
  large);
- ``PointNetwork.workers``: one worker process per host, started and watched, with the
  switches and the nodes' shells as the dependencies whose death fails the wait at once;
- ``verify_reports``: every worker's result against the expected sum, logged per rank when
  wrong, its files removed once read.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol, Sequence

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
from switches.fabric import SharedJob, jobs_sharing

if TYPE_CHECKING:  # Mininet's; imported where a network is built, so that --simulate runs without Mininet installed
    from network.emulation import EmulatedNetwork

log = logging.getLogger(__name__)

BASELINE_PORT = 47000
"""TCP port the ring and parameter-server ranks listen on."""


def worker_spec(point: Point, method: str) -> WorkerSpec:
    """What every worker process of a method needs (hosts/worker.py), whatever its job."""
    topology = point.topology
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
    )


def job_parameters(point: Point, method: str) -> dict[str, Any] | None:
    """The switch job's parameters of ``method`` at ``point``, as its protocol's record gives
    them (methods/aggregation.py; the data path resolved only for a method that has one),
    for its workers' spec; None for a method with no switch job."""
    registered = methods.by_name(method)
    if registered.aggregation is None:
        return None
    return job_section(registered.job_parameters(point.protocol, point.data_path.name))


class KindRunner(Protocol):
    def run(self) -> bool:
        """Run everything not already in the results; True when every result verified."""


@dataclass(frozen=True)
class ExperimentKind:
    """One kind of experiment: the plug-in run_experiment.py drives without knowing which."""

    name: str
    """What a workload record names as its ``experiment`` (workloads/kinds/)."""
    writer: Callable[[Path, Experiment, str], ResultsWriter]
    """(run folder, experiment, switch target) -> the results writer."""
    runner: Callable[[Experiment, str, Any, Callable[[str], None]], KindRunner]
    """(experiment, target, writer, progress) -> what runs it; progress(what) per unit done."""
    unit: str
    """What one step of the progress bar is (job, step, repetition)."""
    units: Callable[[Experiment], int]
    """How many units the whole run has."""
    report: Callable[[dict[str, Any]], str]
    """The table printed from the finished run's summary."""
    simulator: Callable[[Experiment, str, Any, Callable[[str], None]], KindRunner] | None = None
    """Like ``runner``, on the simulated clock (run_experiment.py --simulate); None: this kind
    cannot be simulated yet."""
    applies: Callable[[Experiment], bool] | None = None
    """Whether a loaded config is of this kind whatever its workload (several jobs on one
    switch), asked before the workload's own kind; None: only when the workload names it."""
    check: Callable[[Experiment], None] = lambda experiment: None
    """The rules of this kind that span keys (the shared-switch kind's jobs), asked once a
    config of this kind has loaded (``experiments.kinds.load``): a ConfigError naming the point
    and the key. Rules every kind shares stay in experiments/config.py."""


@dataclass(frozen=True)
class PointNetwork:
    """One point's network while it is held, with the point's work and log folders."""

    net: EmulatedNetwork
    point: Point
    work: Path
    """Inputs and workers' results; exists while the network does."""
    log_dir: Path

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
        with WorkerGroup(method, [self.net.host(h.name) for h in chosen], spec_path, self.log_dir,
                         self.point.limits.limit("worker_exit_s"),
                         dependencies=self.net.dependencies(),
                         remote_shells=self.net.remote_host_shells(), waited_for=self.net.waited_for,
                         switch_problems=self.net.switch_problems) as group, \
                group.dependencies_checked():
            group.start(self.point.limits.limit("worker_start_s"))
            yield group

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


@contextlib.contextmanager
def point_network(experiment: Experiment, point: Point, target: str, writer: ResultsWriter,
                  jobs: Sequence[SharedJob] = ()) -> Iterator[PointNetwork]:
    """Build ``point``'s network, record it in the results, hold it with its work folder."""
    from network.emulation import EmulatedNetwork

    log_dir = writer.log_dir / f"point{point.index}"
    with EmulatedNetwork(
        point.topology,
        target,
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
            yield PointNetwork(net, point, work, log_dir)
        finally:
            shutil.rmtree(writer.work_dir, ignore_errors=True)


def network_jobs(point: Point, shared: Sequence[SharedJob] = ()) -> list[Job]:
    """The in-network jobs of every protocol ``point``'s methods run, as its network takes
    them: one of every host, or the ``shared`` ones, each with its protocol's parameters."""
    hosts = tuple(h.name for h in point.topology.hosts)
    return [Job(aggregation, job.parameters, job.hosts) for aggregation in methods.aggregations_of(point.methods)
            for job in jobs_sharing(aggregation.parameters(point.protocol, point.data_path.name), hosts, shared)]


def take_result(report: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray | None]:
    """A report's result values and SwitchML's integer sum (None for the baselines), its
    files removed once read."""
    values = np.load(report["result"])
    int_sum = np.load(report["int_sum"]) if "int_sum" in report else None
    for key in RESULT_FILES:
        if key in report:
            Path(report[key]).unlink()
    return values, int_sum


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


def pending_methods(writer: ResultsWriter, point: Point, progress: Callable[[str], None], methods_run: Sequence[str]) -> list[str]:
    """Of ``methods_run`` at ``point``, those still to run: one with every repetition in the
    results already (``--resume``) is skipped, its units reported done; an interrupted one
    has its rows discarded, to run again whole."""
    pending = []
    for method in methods_run:
        if writer.has_rows(point.index, method, point.repetitions):
            log.info("point %d %s: already in %s, skipped (resume)", point.index, method, writer.run_dir)
            for _ in range(point.repetitions):
                progress("skipped")
        else:
            writer.discard(point.index, method)
            pending.append(method)
    return pending
