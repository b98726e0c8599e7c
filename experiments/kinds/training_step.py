"""One training iteration of a model, layer by layer: every layer's all-reduce a job, on either clock.

The workload ``layers`` (workloads/kinds/layers.py) lists an iteration's all-reduces in the
order the backward pass hands them over. Each method runs them one after another, on an
otherwise idle network, as one communication stream runs them; runs.csv holds one
repetition per job (``repetition`` is the job's index, ``elements`` its size). The
iteration's time is composed from those times and the layers' compute
(workloads/step_schedule.py) where the figure is drawn (analysis/training_step.py): a job's
time does not depend on when it starts, because no two jobs share the network.

One runner, on experiments/harness.py's ``PointNetwork`` whichever the clock: one worker
per host, released job by job; each rank makes job j's tensor itself when released with j
(hosts/layer_jobs.py), and the runner makes every rank's to verify the sum exactly. A
method the clock gives by a model (the simulated clock's ring and PS: line-rate bound times
``simulation.baseline_efficiency``) is recorded as one and not run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from experiments.config import Point
from experiments.harness import ExperimentKind, PointNetwork, PointRunner, point_network, verify_reports, worker_spec
from experiments.job_meter import JobMeasurement
from experiments.results import ResultsWriter, format_table
from experiments.workers import REPORT_GRACE_S, RESULT_FILES
from methods import own_sums
from methods.verification import Verdict, expected_for
from workloads.kinds.layers import LayerJob, job_tensor, layer_jobs

class TrainingStepRunner(PointRunner):
    """Every point's iteration: one network per point, each method's workers released job by job."""

    def units(self, point: Point) -> int:
        return len(layer_jobs(point.workload))

    def run_point(self, point: Point, methods_left: list[str]) -> bool:
        jobs = layer_jobs(point.workload)
        with point_network(self.experiment, point, self.clock, self.writer) as held:
            if held.repeats_jobs_exactly:
                self.clock.note(self.writer, "repeated_sizes", REPEATED_SIZES)
            ok = True
            for method in methods_left:
                spec = replace(worker_spec(point, method), workload=dict(point.workload))
                ok &= self._run_method(held, method, spec.write(held.work / f"{method}.json"), jobs)
            return ok

    def _run_method(self, held: PointNetwork, method: str, spec_path: Path, jobs: Sequence[LayerJob]) -> bool:
        point = held.point
        n_workers = len(point.topology.hosts)
        held.prepare(method)
        ok = True
        ran: dict[int, tuple[list[dict[str, Any]], list[Verdict], JobMeasurement]] = {}
        with held.workers(method, spec_path) as group:
            meter = held.meter(group)
            for index, job in enumerate(jobs):
                if job.elements not in ran:
                    meter.start()
                    group.release(index)
                    reports = group.collect("done", held.job_limit(method), grace_s=REPORT_GRACE_S)
                    measured = meter.stop()
                    expected = expected_for([job_tensor(point.workload, job, index, rank) for rank in range(n_workers)], point.job.k,
                                            own_sums(point.methods, point.protocol))
                    verdicts = verify_reports(method, expected, reports, f"point {point.index} {method} job {index}")
                    if not all(v.verified for v in verdicts):
                        held.explain_wrong_sums(method, measured, reports, verdicts)
                    ok &= all(v.verified for v in verdicts)
                    if held.repeats_jobs_exactly:  # the same time again: see REPEATED_SIZES; its stats kept, not its arrays
                        ran[job.elements] = ([{k: v for k, v in r.items() if k not in RESULT_FILES} for r in reports], verdicts, measured)
                else:
                    reports, verdicts, measured = ran[job.elements]
                self.writer.add_repetition(point, method, index, reports, verdicts, measured, held.loss_mechanism, elements=job.elements)
                self.progress(f"{method} layer {job.layer}")
            group.finish()
        return ok


REPEATED_SIZES = ("on lossless links, a job of a size already simulated in the same iteration is not simulated again: "
                  "its rows repeat that job's: on the idle network a job of one size takes the same simulated time "
                  "again, within 1.2 % (the first job on a fresh network is that much faster; tests/test_training_step.py)")
"""summary.json ``simulation.repeated_sizes``. Why: an iteration repeats sizes (BERT's 24 alike
encoder layers, a large layer's jobs of max_job_elements) and simulating the 2.4 G elements of
the paper's eight models job by job took hours of CPU on this machine."""


KIND = ExperimentKind(
    name="training_step",
    writer=ResultsWriter,
    runner=TrainingStepRunner,
    unit="job",
    units=lambda experiment: sum(len(layer_jobs(p.workload)) * len(p.methods) for p in experiment.points),
    report=format_table,
)
"""A model's training iteration: every layer's all-reduce one job (workload ``layers``)."""
