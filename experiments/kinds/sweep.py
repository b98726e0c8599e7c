"""The sweep: every point, method and repetition of an all-reduce experiment, a fresh network per point.

For each point (on experiments/harness.py's skeleton, on either clock): write each rank's
input tensor, then for each method start one worker per host, release the repetitions one
by one, meter each repetition (the switch counters; emulated, each process's CPU time),
verify every worker's result, and append tidy rows to the results (experiments.results).
A method the clock gives by a model (the simulated clock's baselines) is recorded as one
and not run. Everything started is stopped on the way out, whether the run succeeds,
fails, or is interrupted.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from experiments.config import Point
from workloads.kinds import point_inputs
from experiments.harness import ExperimentKind, PointNetwork, PointRunner, point_network, verify_reports, worker_spec
from experiments.results import ResultsWriter, format_table
from methods import own_sums
from methods.verification import Expected, expected_for
from experiments.workers import REPORT_GRACE_S


class ExperimentRunner(PointRunner):
    def run_point(self, point: Point, methods: list[str]) -> bool:
        """One network for the point: every pending method on the same inputs."""
        with point_network(self.experiment, point, self.clock, self.writer) as held:
            inputs = point_inputs(point.workload, len(point.topology.hosts))
            input_paths = held.write_inputs(inputs)
            expected = expected_for(inputs, point.job.k, own_sums(point.methods, point.protocol))
            del inputs
            ok = True
            for method in methods:
                spec_path = replace(worker_spec(point, method), inputs=input_paths).write(held.work / f"{method}.json")
                ok &= self._run_method(held, method, spec_path, expected)
            return ok

    def _run_method(self, held: PointNetwork, method: str, spec_path: Path, expected: Expected) -> bool:
        point = held.point
        held.prepare(method)
        ok = True
        with held.workers(method, spec_path) as group:
            meter = held.meter(group)
            for repetition in range(point.repetitions):
                meter.start()  # every switch's counters are per repetition
                group.release(repetition)
                reports = group.collect("done", held.job_limit(method), grace_s=REPORT_GRACE_S)
                measured = meter.stop()
                verdicts = verify_reports(method, expected, reports, f"point {point.index} {method} rep {repetition}")
                if not all(v.verified for v in verdicts):
                    held.explain_wrong_sums(method, measured, reports, verdicts)
                ok &= all(v.verified for v in verdicts)
                self.writer.add_repetition(point, method, repetition, reports, verdicts, measured, held.loss_mechanism)
                self.progress(f"{method} rep {repetition}")
            group.finish()
        return ok


KIND = ExperimentKind(
    name="sweep",
    writer=ResultsWriter,
    runner=ExperimentRunner,
    unit="job",
    units=lambda experiment: sum(p.repetitions * len(p.methods) for p in experiment.points),
    report=format_table,
)
"""All-reduce jobs: every point x method x repetition (the default kind)."""
