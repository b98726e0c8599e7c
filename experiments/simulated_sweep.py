"""The sweep on the simulated clock (``run_experiment.py CONFIG --simulate``): the same
points, repetitions, inputs, verification and results tables as experiments/kinds/sweep.py,
with each point's network a ``simulation.network.SimulatedNetwork`` instead of Mininet.

Every SwitchML worker is WorkerCore and every switch its target's own data plane, so the
integer sums are verified exactly as in emulation (methods/verification.py). What the
simulator does not have is refused before anything runs, in one line naming it
(``check_simulable``). Times in the results are simulated seconds; fidelity.csv stays
empty (no process ran on a CPU), and summary.json says ``simulated: true`` with the
models' parameters under ``simulation`` (docs/results-format.md, "Simulated runs").
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import replace
from typing import Any, Callable, Sequence

import methods
from experiments.config import Experiment, Point
from experiments.harness import pending_methods, verify_results
from experiments.job_meter import JobMeasurement
from experiments.results import ResultsWriter
from hosts.switchml.method import retransmit_policy
from methods.aggregation import DataPath, DataPathUnavailable
from methods.verification import expected_for
from protocol.params import mbps_to_bps
from protocol.worker_spec import SwitchMLParameters
from simulation.native import library as native_simulator
from simulation.native.star import has_aggregation_path, star_problem
from simulation.network import DROP_SIMULATOR, NATIVE_CORE, PYTHON_CORE, JobSetup, SimulatedNetwork, SimulationUnsupported, loss_mechanism_of
from simulation.worker import WorkerSetup
from switches.fabric import SharedJob
from switches.target import SwitchTarget
from switches.targets import AUTO, lookup, root_run_targets, simulated_data_plane
from workloads.kinds import point_inputs

log = logging.getLogger(__name__)

BASELINE_MODELS = "baseline_models"
"""summary.json ``simulation`` key: point -> method -> its model (``baseline_model``)."""
SIMULATED_DATA_PATH = DataPath("python", "hosts/switchml/core.py on the simulated clock (simulation/worker.py, on SimPy)")
NATIVE_SIMULATED_DATA_PATH = DataPath("native", "hosts/switchml/native/worker.c on the simulated clock (simulation/native/star.c's "
                                                "event loop: the same events as on SimPy, in C)")
DEFAULT_SEED = 1
US = 1e-6


class SimulationFailed(RuntimeError):
    """A simulated job did not finish (a SwitchML worker's deadline passed): the message says which slots waited."""


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


def check_simulable(experiment: Experiment) -> Experiment:
    """``experiment`` as the simulator runs it (its workers' loop is core.py), or
    SimulationUnsupported naming the first thing it lacks."""
    for point in experiment.points:
        where = f"{experiment.source}: point {point.index}"
        if point.cluster is not None:
            raise SimulationUnsupported(f"{where}: --simulate runs on this machine; remove the cluster section")
        if not any(simulated_here(m, point) for m in point.methods):
            raise SimulationUnsupported(f"{where}: --simulate runs SwitchML and gives {', '.join(point.methods)} by their models "
                                        "only beside it; add switchml to methods")
        if point.workload_kind.inputs is None:
            raise SimulationUnsupported(f"{where}: --simulate needs a workload with given tensors, not {point.workload['kind']}")
    return experiment.with_data_paths({point.index: simulated_data_path(experiment, point) for point in experiment.points})


def simulated_data_path(experiment: Experiment, point: Point) -> DataPath:
    """Which worker core simulates ``point``: worker.c on star.c's loop where the config's
    ``protocol.data_path`` allows it (``auto``: where it builds) and the network is a star
    that loop runs (simulation/native/star.py, ``star_problem``), else core.py on SimPy,
    with the reason."""
    choice = point.protocol["data_path"]
    if choice == "python":
        return replace(SIMULATED_DATA_PATH, reason=f"{SIMULATED_DATA_PATH.reason}: protocol.data_path: python")
    topology = point.topology
    plane = simulated_data_plane(experiment.data["switch"]["target"])
    problem = star_problem(len(topology.switches), len(topology.hosts), len(topology.hosts), len(point.data.get("jobs") or ()),
                           loss_mechanism_of(topology, point.data["loss_mechanism"]) == DROP_SIMULATOR,
                           float(experiment.data.get("simulation", {}).get("host_packet_cost_us", 0.0)),
                           has_aggregation_path(plane.simulated(k=point.protocol["k"], max_pool_size=point.protocol["pool_size"], seed=0)))
    try:
        native_simulator()
    except DataPathUnavailable as exc:
        problem = problem or str(exc)
    if problem is None:
        return NATIVE_SIMULATED_DATA_PATH
    if choice == "native":
        raise SimulationUnsupported(f"{experiment.source}: point {point.index}: protocol.data_path: native: the native core is "
                                    f"simulated for a star of one job with loss on its links only; this one has {problem}")
    return replace(SIMULATED_DATA_PATH, reason=f"{SIMULATED_DATA_PATH.reason}: the native core's loop does not take {problem}")


def simulation_record(experiment: Experiment) -> dict[str, Any]:
    """summary.json's ``simulation``: what the simulated network models and with which parameters."""
    section = experiment.data.get("simulation", {})
    return {
        "engine": "simpy",
        "clock": "simulated seconds (tat_s, timeline t_ms)",
        "switch": "the target's data-plane contract (docs/dataplane.md) as its own simulated data plane or, for a target without "
                  "one, the first target's that has one (network.json: data_plane), processing every frame at its arrival",
        "worker": "per point, summary.json's data_path: worker.c on star.c's loop, or core.py on SimPy",
        "link": "drop-tail FIFO per direction: serialization of the frame's bytes (no preamble, FCS or gap) at the link "
                "rate (after a token bucket of link_burst_bytes, htb's burst, when not 0), then the link's delay; loss independent per frame",
        "host_packet_cost_us": float(section.get("host_packet_cost_us", 0.0)),
        "link_burst_bytes": float(section.get("link_burst_bytes", 0.0)),
        "seed": int(section.get("seed", DEFAULT_SEED)),
        "baseline_efficiency": float(section.get("baseline_efficiency", 1.0)),
        "baseline_model": "TAT = elements / (the method's line-rate bound (methods/) x baseline_efficiency): a model, not a "
                          "simulation; not in runs.csv",
        BASELINE_MODELS: {},
    }


def simulated_here(method: str, point: Point) -> bool:
    """Whether the simulator runs ``method``'s own code: an in-network method (its record
    names its protocol); the others are given by their model."""
    return methods.by_name(method).aggregation is not None


def baseline_model(point: Point, method: str, efficiency: float) -> dict[str, float | str]:
    """``method``'s TAT at ``point`` by its line-rate bound and ``efficiency``, labelled as a model."""
    n = len(point.topology.hosts)
    bound = methods.by_name(method).bound(mbps_to_bps(point.topology.link_mbps), n, point.protocol["k"])
    ate = bound * efficiency
    return {"model": "line-rate bound x efficiency", "efficiency": efficiency, "bound_ate_per_s": bound, "ate_per_s": ate,
            "tat_s": point.workload_info.elements / ate}


def simulated_network(experiment: Experiment, point: Point, target: SwitchTarget, method: str,
                      shared: Sequence[SharedJob] = ()) -> SimulatedNetwork:
    """``point``'s network on the simulated clock, its workers set up as hosts/allreduce.py sets
    up a SwitchMLClient from the worker spec (retransmission policy, deadline): every host a
    worker of the point's job, or, with ``shared``, each job's hosts its workers (ranks in
    the job's order, its own job id and pool)."""
    protocol, topology = point.protocol, point.topology
    parameters = SwitchMLParameters.from_config(protocol, SIMULATED_DATA_PATH.name)
    deadline_s = point.job_limit(method).seconds
    record = simulation_record(experiment)
    cost_s = record["host_packet_cost_us"] * US
    index = {host.name: i for i, host in enumerate(topology.hosts)}
    jobs = shared or (SharedJob(parameters.job_id, tuple(host.name for host in topology.hosts), parameters.pool_size),)
    setups: dict[int, WorkerSetup] = {}
    for job in jobs:
        policy = retransmit_policy(replace(parameters, pool_size=job.pool_size), topology.link_mbps)
        for rank, name in enumerate(job.hosts):
            setups[index[name]] = WorkerSetup(rank, len(job.hosts), job.job_id, parameters.k, job.pool_size, policy, deadline_s, cost_s)
    setup = JobSetup(parameters.k, parameters.pool_size, experiment.data["switch"]["max_pool_size"], parameters.job_id, setups.get,
                     tuple(shared))
    core = NATIVE_CORE if point.data_path.name == NATIVE_SIMULATED_DATA_PATH.name and not shared else PYTHON_CORE
    return SimulatedNetwork(topology, target, setup, point.data["loss_mechanism"], record["seed"], record["link_burst_bytes"],
                            simulated_data_plane(target.name), core)


class SimulatedSweepRunner:
    """experiments/kinds/sweep.py's ExperimentRunner, on simulated networks."""

    def __init__(self, experiment: Experiment, target: str, writer: ResultsWriter, progress: Callable[[str], None]) -> None:
        self.experiment = check_simulable(experiment)
        self.target = lookup(target)
        self.writer = writer
        self.progress = progress
        self.record = simulation_record(experiment)
        writer.mark_simulated(self.record)

    def run(self) -> bool:
        verified = True
        for point in self.experiment.points:
            models = {m: baseline_model(point, m, self.record["baseline_efficiency"]) for m in point.methods if not simulated_here(m, point)}
            if models:
                self.record[BASELINE_MODELS][str(point.index)] = models
                self.writer.mark_simulated(self.record)
                for method, model in models.items():
                    log.info("point %d %s: %.6g s by its model (%s, efficiency %g)", point.index, method, model["tat_s"], model["model"],
                             model["efficiency"])
                    for _ in range(point.repetitions):
                        self.progress(f"{method} (model)")
            for method in pending_methods(self.writer, point, self.progress, [m for m in point.methods if m not in models]):
                verified &= self._run_method(point, method)
        return verified

    def _run_method(self, point: Point, method: str) -> bool:
        net = simulated_network(self.experiment, point, self.target, method)
        self.writer.record_network(point.index, net.describe())
        inputs = point_inputs(point.workload, len(point.topology.hosts))
        expected = expected_for(inputs, point.protocol["k"])
        methods.by_name(method).prepare(net, point.protocol)
        ok = True
        for repetition in range(point.repetitions):
            started, began = net.env.now, time.perf_counter()
            try:
                results = net.allreduce(inputs)
            except TimeoutError as exc:  # the protocol's job missed its deadline (hosts/switchml/job.py: SwitchMLTimeout)
                raise SimulationFailed(f"point {point.index} {method} rep {repetition} (simulated): {exc}") from None
            wall = time.perf_counter() - began
            verdicts = verify_results(method, expected, [(r.values, r.int_sum) for r in results],
                                      f"point {point.index} {method} rep {repetition} (simulated)")
            ok &= all(v.verified for v in verdicts)
            reports = [{"stats": dataclasses.asdict(r.stats)} for r in results]
            measured = JobMeasurement(cpu={}, wall_s=net.env.now - started, tx_mbps={}, counters=net.event_counters(), frames={})
            self.writer.add_repetition(point, method, repetition, reports, verdicts, measured, net.loss_mechanism)
            log.info("point %d %s rep %d: %.6g simulated s in %.2f s of wall time", point.index, method, repetition,
                     max(r.stats.tat_s for r in results), wall)
            self.progress(f"{method} rep {repetition}")
        return ok
