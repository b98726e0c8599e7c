"""One training iteration of a model, layer by layer: every layer's all-reduce a job, on either clock.

The workload ``layers`` (workloads/kinds/layers.py) lists an iteration's all-reduces in the
order the backward pass hands them over. Each method runs them one after another, on an
otherwise idle network, as one communication stream runs them; runs.csv holds one
repetition per job (``repetition`` is the job's index, ``elements`` its size). The
iteration's time is composed from those times and the layers' compute
(workloads/step_schedule.py) where the figure is drawn (analysis/tables.py,
``training_step_table``): a job's time does not depend on when it starts, because no two
jobs share the network.

Emulated: one worker per host holds every job's tensor and all-reduces job j's slice when
released with j (hosts/layer_jobs.py). Simulated: SwitchML's jobs run on the simulated
network (``SimulatedNetwork.allreduce``); the ring and the PS are their line-rate bound
times ``simulation.baseline_efficiency``, a model recorded in summary.json, as for a sweep.
Every SwitchML result is verified exactly on both clocks.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

import methods
from experiments.config import Experiment, Point
from experiments.harness import ExperimentKind, PointNetwork, point_network, verify_reports, verify_results, worker_spec
from experiments.job_meter import JobMeasurement
from experiments.results import ResultsWriter, format_table
from experiments.simulated_sweep import (BASELINE_MODELS, SimulationFailed, baseline_model, check_simulable, simulated_here,
                                         simulated_network, simulation_record)
from experiments.workers import REPORT_GRACE_S
from methods.verification import expected_for
from switches.targets import lookup
from workloads.kinds import point_inputs
from workloads.kinds.layers import LayerJob, job_tensor, layer_jobs

log = logging.getLogger(__name__)


def pending(writer: ResultsWriter, point: Point, jobs: int, progress: Callable[[str], None], candidates: Sequence[str]) -> list[str]:
    """Of ``candidates``, the methods whose iteration is not whole in the results (an interrupted one's rows discarded)."""
    found = []
    for method in candidates:
        if writer.has_rows(point.index, method, jobs):
            log.info("point %d %s: already in %s, skipped (resume)", point.index, method, writer.run_dir)
            for _ in range(jobs):
                progress("skipped")
        else:
            writer.discard(point.index, method)
            found.append(method)
    return found


class TrainingStepRunner:
    """The emulated iteration: one network per point, each method's workers released job by job."""

    def __init__(self, experiment: Experiment, target: str, writer: ResultsWriter, progress: Callable[[str], None]) -> None:
        self.experiment = experiment
        self.target = target
        self.writer = writer
        self.progress = progress

    def run(self) -> bool:
        verified = True
        for point in self.experiment.points:
            jobs = layer_jobs(point.workload)
            methods_left = pending(self.writer, point, len(jobs), self.progress, point.methods)
            if methods_left:
                verified &= self._run_point(point, jobs, methods_left)
        return verified

    def _run_point(self, point: Point, jobs: Sequence[LayerJob], methods_left: list[str]) -> bool:
        with point_network(self.experiment, point, self.target, self.writer) as held:
            tensors = point_inputs(point.workload, len(point.topology.hosts))
            bounds = np.cumsum([0] + [job.elements for job in jobs])
            paths = []
            for rank, tensor in enumerate(tensors):
                path = held.work / f"input-rank{rank}.npz"
                np.savez(path, tensor=tensor, bounds=bounds)
                paths.append(str(path))
            expected = [expected_for([t[bounds[i]:bounds[i + 1]] for t in tensors], point.job.k) for i in range(len(jobs))]
            del tensors
            ok = True
            for method in methods_left:
                spec_path = replace(worker_spec(point, method), inputs=tuple(paths)).write(held.work / f"{method}.json")
                ok &= self._run_method(held, method, spec_path, jobs, expected)
            return ok

    def _run_method(self, held: PointNetwork, method: str, spec_path: Path, jobs: Sequence[LayerJob], expected: list) -> bool:
        point = held.point
        held.prepare(method)
        ok = True
        with held.workers(method, spec_path) as group:
            meter = held.meter(group)
            for index, job in enumerate(jobs):
                meter.start()
                group.release(index)
                reports = group.collect("done", held.job_limit(method), grace_s=REPORT_GRACE_S)
                measured = meter.stop()
                verdicts = verify_reports(method, expected[index], reports, f"point {point.index} {method} job {index}")
                ok &= all(v.verified for v in verdicts)
                self.writer.add_repetition(point, method, index, reports, verdicts, measured, held.net.report.loss_mechanism,
                                           elements=job.elements)
                self.progress(f"{method} layer {job.layer}")
            group.finish()
        return ok


REPEATED_SIZES = ("on lossless links, a job of a size already simulated in the same iteration is not simulated again: "
                  "its rows repeat that job's: on the idle network a job of one size takes the same simulated time "
                  "again, within 1.2 % (the first job on a fresh network is that much faster; tests/test_training_step.py)")
"""summary.json ``simulation.repeated_sizes``. Why: an iteration repeats sizes (BERT's 24 alike
encoder layers, a large layer's jobs of max_job_elements) and simulating the 2.4 G elements of
the paper's eight models job by job took hours of CPU on this machine."""


class SimulatedTrainingStepRunner:
    """The iteration on the simulated clock: SwitchML's jobs simulated, the baselines by their model."""

    def __init__(self, experiment: Experiment, target: str, writer: ResultsWriter, progress: Callable[[str], None]) -> None:
        self.experiment = check_simulable(experiment)
        self.target = lookup(target)
        self.writer = writer
        self.progress = progress
        self.record = simulation_record(experiment) | {"repeated_sizes": REPEATED_SIZES}
        writer.mark_simulated(self.record)

    def run(self) -> bool:
        verified = True
        for point in self.experiment.points:
            jobs = layer_jobs(point.workload)
            models = {m: baseline_model(point, m, self.record["baseline_efficiency"]) for m in point.methods if not simulated_here(m, point)}
            if models:
                self.record[BASELINE_MODELS][str(point.index)] = models
                self.writer.mark_simulated(self.record)
                for method in models:
                    for _ in jobs:
                        self.progress(f"{method} (model)")
            for method in pending(self.writer, point, len(jobs), self.progress, [m for m in point.methods if m not in models]):
                verified &= self._run_method(point, method, jobs)
        return verified

    def _run_method(self, point: Point, method: str, jobs: Sequence[LayerJob]) -> bool:
        net = simulated_network(self.experiment, point, self.target, method)
        self.writer.record_network(point.index, net.describe())
        methods.by_name(method).prepare(net, point.protocol)
        n_workers = len(point.topology.hosts)
        ok = True
        by_size: dict[int, tuple[list[dict], list, JobMeasurement]] = {}
        for index, job in enumerate(jobs):
            if job.elements in by_size:  # the same simulated time: see REPEATED_SIZES
                self.writer.add_repetition(point, method, index, *by_size[job.elements], net.loss_mechanism, elements=job.elements)
                self.progress(f"{method} layer {job.layer}")
                continue
            tensors = [job_tensor(point.workload, job, index, rank) for rank in range(n_workers)]
            expected = expected_for(tensors, point.protocol["k"])
            started = net.env.now
            try:
                results = net.allreduce(tensors)
            except TimeoutError as exc:  # the protocol's job missed its deadline
                raise SimulationFailed(f"point {point.index} {method} job {index} (simulated): {exc}") from None
            what = f"point {point.index} {method} job {index} (simulated)"
            verdicts = verify_results(method, expected, [(r.values, r.int_sum) for r in results], what)
            ok &= all(v.verified for v in verdicts)
            reports = [{"stats": dataclasses.asdict(r.stats)} for r in results]
            measured = JobMeasurement(cpu={}, wall_s=net.env.now - started, tx_mbps={}, counters=net.event_counters(), frames={})
            self.writer.add_repetition(point, method, index, reports, verdicts, measured, net.loss_mechanism, elements=job.elements)
            self.progress(f"{method} layer {job.layer}")
            if point.topology.link_loss == 0:
                by_size[job.elements] = (reports, verdicts, measured)
        return ok


KIND = ExperimentKind(
    name="training_step",
    writer=ResultsWriter,
    runner=TrainingStepRunner,
    unit="job",
    units=lambda experiment: sum(len(layer_jobs(p.workload)) * len(p.methods) for p in experiment.points),
    report=format_table,
    simulator=SimulatedTrainingStepRunner,
)
"""A model's training iteration: every layer's all-reduce one job (workload ``layers``)."""
