"""Running a training workload: every method trains the same model through the emulated network.

Before the network is built, the exact reference (float64 sums) and the quantization
ablation are replayed offline (experiments/kinds/training_replay.py) and their learning curves
written. Then, per method, one worker per host trains step by step (hosts/training.py):
the runner releases step t, collects every worker's report, and replays the step itself
(``Replay``): it computes every worker's gradient from the parameters it holds, checks the
all-reduce result against them exactly as for any other tensor (SwitchML bit for bit, the
baselines within the float32 bound), applies the verified result, and checks that every
worker reports the same gradient, result and parameters as its replay (digests). So a step
verifies only when every worker holds exactly the parameters of a correct training.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

import numpy as np
from threadpoolctl import threadpool_limits

from experiments.config import Experiment
from experiments.harness import Clock, ExperimentKind, PointNetwork, point_network, take_result, worker_spec
from experiments.results import format_table
from experiments.kinds.training_replay import Replay, Trajectory, exact_sum, quantized_sum, replay
from experiments.kinds.training_results import EXACT, TrainingResultsWriter, ablation_series, format_training_table
from methods.verification import OwnSum, Verdict, expected_for
from experiments.workers import REPORT_GRACE_S
from base.yamlschema import ConfigError
from hosts.training import ARRAYS_RANK
import methods
from protocol.worker_spec import TrainingSection, WorkerSpec
from workloads.training import MLP, TrainingConfig, array_digest, load_dataset, minibatch

log = logging.getLogger(__name__)

Evaluation = tuple[float, float, float]
"""(mean training loss, training accuracy, test accuracy) of a model's parameters."""


class StepCheck(Protocol):
    """How a training kind checks and measures one method's steps."""

    def start(self) -> tuple[Evaluation, float]:
        """The parameters every worker starts from: their evaluation and distance to the exact reference's."""

    def step(self, step: int, reports: list[dict[str, Any]]) -> tuple[list[Verdict], Evaluation, float]:
        """Every rank's verdict on ``step``, and the evaluation and distance of the parameters after it."""


class StepTrainingRunner(ABC):
    """What every training kind's runner does alike: one network for the methods still to
    train (resume skips the finished ones), each method's workers told the training section.

    A kind adds ``_record_references`` (its offline series; returns the exact one, which
    ``_train`` compares with) and ``_train`` (one method's training on the held network).
    """

    def __init__(self, experiment: Experiment, clock: Clock, writer: TrainingResultsWriter,
                 progress: Callable[[str], None]) -> None:
        self.experiment = experiment
        self.clock = clock
        self.writer = writer
        self.progress = progress
        self.point = experiment.points[0]
        self.config = TrainingConfig.from_workload(self.point.workload)
        self.n_workers = len(self.point.topology.hosts)
        self.data = load_dataset(self.config)
        try:
            minibatch(self.config, self.data, self.n_workers - 1, self.n_workers, 1)
        except ValueError as exc:
            raise ConfigError(f"{experiment.source}: workload.batch_size: {exc}") from None

    def run(self) -> bool:
        """Replay the references, then train every method not already in the results.

        With one BLAS thread: the model's matrices are small, and on a machine whose cores
        the emulation keeps busy, OpenBLAS threads waiting for each other made the runner's
        per-step evaluation about three times slower than one thread (measured on 2 cores).
        """
        with threadpool_limits(limits=1, user_api="blas"):
            exact = self._record_references()
            pending = self._pending_methods()
            return self._train_methods(pending, exact) if pending else True

    @abstractmethod
    def _record_references(self) -> Any:
        """Write the offline series' learning curves; return the exact reference, which every step is compared with."""

    @abstractmethod
    def _step_check(self, method: str, exact: Any) -> StepCheck:
        """How one method's steps are checked and measured, from its workers' reports."""

    def _train(self, held: PointNetwork, method: str, spec: WorkerSpec, exact: Any) -> bool:
        """One method's training: release each step, check it, record its rows."""
        point = self.point
        spec_path = spec.write(held.work / f"{method}.json")
        held.prepare(method)
        check = self._step_check(method, exact)
        ok, emulated_s = True, 0.0
        limit = held.job_limit(method)
        with held.workers(method, spec_path) as group:
            meter = held.meter(group)
            meter.start()
            self.writer.add_training_steps([step_row(method, method, "network", sum_bits(method), 0, *check.start(), START_TIMING)])
            for step in range(1, self.config.steps + 1):
                group.release(step)
                reports = group.collect("done", limit, grace_s=REPORT_GRACE_S)
                verdicts, evaluation, param_diff = check.step(step, reports)
                verified = all(v.verified for v in verdicts)
                for rank, verdict in enumerate(verdicts):
                    if not verdict.verified:
                        log.error("%s step %d rank %d: NOT VERIFIED: %s", method, step, rank, verdict.detail)
                ok &= verified
                timing = step_timing(reports, emulated_s, verified)
                emulated_s = timing["emulated_time_s"]
                row = step_row(method, method, "network", sum_bits(method), step, evaluation, param_diff, timing)
                self.writer.add_repetition(point, method, step, reports, verdicts, None, held.loss_mechanism)
                self.writer.add_training_steps([row])
                self.progress(f"{method} step {step}: test accuracy {row['test_accuracy']:.3f}")
            self.writer.add_whole_training(point, method, meter.stop(), held.loss_mechanism)
            group.finish()
        return ok

    def _pending_methods(self) -> list[str]:
        """The methods whose training is not complete in the results (an interrupted one's rows discarded)."""
        pending = []
        modelled = self.clock.modelled(self.point, self.writer)  # the simulated clock's baselines: no training of their own
        for method in self.point.methods:
            if method in modelled:
                for _ in range(self.config.steps):
                    self.progress(f"{method} (model)")
            elif self.writer.series_complete(method, self.config.steps):
                log.info("%s: training already in %s, skipped (resume)", method, self.writer.run_dir)
                for _ in range(self.config.steps):
                    self.progress("skipped")
            else:
                self.writer.discard(self.point.index, method)
                pending.append(method)
        return pending

    def _train_methods(self, methods: list[str], exact: Any) -> bool:
        """One network for every method; the data set file lives in the work folder while it is held."""
        with point_network(self.experiment, self.point, self.clock, self.writer) as held:
            dataset_path = held.work / "dataset.npz"
            self.data.save(dataset_path)
            ok = True
            for method in methods:
                ok &= self._train(held, method, self._spec(method, dataset_path), exact)
            return ok

    def _spec(self, method: str, dataset_path: Path) -> WorkerSpec:
        """What hosts/worker.py needs: the method's usual keys and the training section."""
        section = TrainingSection(self.config.as_dict(), str(dataset_path))
        return replace(worker_spec(self.point, method), training=section)


class TrainingRunner(StepTrainingRunner):
    """The numpy MLP's training: the runner's replay computes and checks every worker's gradient."""

    def __init__(self, experiment: Experiment, clock: Clock, writer: TrainingResultsWriter,
                 progress: Callable[[str], None]) -> None:
        super().__init__(experiment, clock, writer, progress)
        self.model = MLP(self.config.hidden_units)

    def _record_references(self) -> Trajectory:
        """The exact reference and the quantization ablation, replayed offline."""
        exact = replay(self.model, self.config, self.data, self.n_workers, exact_sum)
        self._record_reference(EXACT, EXACT, None, exact, exact)
        for bits in self.point.workload["ablation_bits"]:
            ablation = replay(self.model, self.config, self.data, self.n_workers, quantized_sum(self.point.job.k, bits))
            self._record_reference(ablation_series(bits), methods.SWITCHML.name, bits, ablation, exact)
        return exact

    def _record_reference(self, series: str, method: str, bits: int | None, trajectory: Trajectory, exact: Trajectory) -> None:
        if self.writer.series_complete(series, self.config.steps):
            return
        self.writer.discard_series(series)
        rows = [self._step_row(series, method, "offline", bits, 0, self.model.initial_parameters(self.config.seed), exact)]
        rows += [self._step_row(series, method, "offline", bits, step, trajectory.params[step - 1], exact)
                 for step in range(1, self.config.steps + 1)]
        self.writer.add_training_steps(rows)
        final = rows[-1]
        log.info("%s (offline): test accuracy %.4f, max |params - exact| %.3g", series, final["test_accuracy"],
                 max(row["max_param_diff"] for row in rows))

    def _step_row(self, series: str, method: str, source: str, bits: int | None, step: int, params: np.ndarray,
                  exact: Trajectory) -> dict[str, Any]:
        return step_row(series, method, source, bits, step, *self.measure(step, params, exact), None)

    def measure(self, step: int, params: np.ndarray, exact: Trajectory) -> tuple[Evaluation, float]:
        """(loss, train accuracy, test accuracy) of ``params`` after ``step``, and their distance to exact's."""
        reference = exact.params[step - 1] if step else self.model.initial_parameters(self.config.seed)
        return self.model.evaluate(params, self.data), float(np.max(np.abs(params.astype(np.float64) - reference)))

    def _step_check(self, method: str, exact: Trajectory) -> ReplayCheck:
        return ReplayCheck(self, method, exact)


class ReplayCheck:
    """The MLP's steps checked by the runner's own replay of the training (``verify_step``)."""

    def __init__(self, runner: TrainingRunner, method: str, exact: Trajectory) -> None:
        self.runner = runner
        self.method = method
        self.exact = exact
        self.state = Replay(runner.model, runner.config, runner.data, runner.n_workers)
        self.own = methods.own_sums([method], runner.point.protocol)

    def start(self) -> tuple[Evaluation, float]:
        return self.runner.measure(0, self.state.params, self.exact)

    def step(self, step: int, reports: list[dict[str, Any]]) -> tuple[list[Verdict], Evaluation, float]:
        verdicts = verify_step(self.state, self.method, reports, self.runner.point.job.k, self.own)
        return (verdicts, *self.runner.measure(step, self.state.params, self.exact))


def sum_bits(method: str) -> int | None:
    """The width of a method's sums in the tables' ``bits`` column (SwitchML's 32; none for float sums)."""
    protocol = methods.by_name(method).aggregation
    return None if protocol is None else protocol.sum_bits


NO_TIMING = {"allreduce_s": "", "compute_s": "", "step_s": "", "emulated_time_s": "", "bytes_sent": "", "verified": "", "bytes_received": ""}
"""The timing columns of an offline series' rows."""
START_TIMING = {"allreduce_s": 0.0, "compute_s": 0.0, "step_s": 0.0, "emulated_time_s": 0.0, "bytes_sent": 0, "verified": True, "bytes_received": 0}
"""The timing columns of a network series' step 0 (the parameters every worker starts from)."""


def step_timing(reports: list[dict[str, Any]], emulated_s: float, verified: bool) -> dict[str, Any]:
    """A step's timing columns from every worker's report: the slowest worker's all-reduce,
    compute and step, the emulated time so far (``emulated_s`` before this step), and the
    most payload bytes a worker sent and received."""
    step_s = max(r["stats"]["tat_s"] + r["compute_s"] for r in reports)
    return {"allreduce_s": max(r["stats"]["tat_s"] for r in reports), "compute_s": max(r["compute_s"] for r in reports),
            "step_s": step_s, "emulated_time_s": emulated_s + step_s,
            "bytes_sent": max(r["stats"]["bytes_sent"] for r in reports), "verified": verified,
            "bytes_received": max(r["stats"]["bytes_received"] for r in reports)}


def step_row(series: str, method: str, source: str, bits: int | None, step: int, evaluation: Evaluation,
             max_param_diff: float, timing: dict[str, Any] | None) -> dict[str, Any]:
    """One row of training_steps.csv: the parameters' (loss, train accuracy, test accuracy)
    after ``step``, their distance to the exact reference's, and the step's timing."""
    loss, train_accuracy, test_accuracy = evaluation
    return {
        "series": series, "method": method, "source": source, "bits": "" if bits is None else bits, "step": step,
        "loss": loss, "train_accuracy": train_accuracy, "test_accuracy": test_accuracy, "max_param_diff": max_param_diff,
        **(timing or NO_TIMING),
    }


def verify_step(state: Replay, method: str, reports: list[dict[str, Any]], k: int, own: Mapping[str, OwnSum]) -> list[Verdict]:
    """Verify one step's all-reduce against the replay's gradients and advance the replay.

    Rank ``ARRAYS_RANK``'s result arrays are verified as any all-reduce result is (``own``: the
    exact sums of a protocol that quantizes its own way, ``methods.own_sums``); every
    rank's digests must then equal the replay's: its gradient, that verified result (and
    integer sum) and the parameters after applying it. The replay applies the result the
    workers received, so a failed step is reported and the training continues from what
    the workers hold.
    """
    gradients = state.gradients()
    expected = expected_for(gradients, k, own)
    values, int_sum = take_result(reports[ARRAYS_RANK])
    verdict = methods.by_name(method).verify(expected, values, int_sum)
    params = state.apply(values)
    shared = {"result": array_digest(values), "parameters": array_digest(params)}
    if int_sum is not None:
        shared["int_sum"] = array_digest(int_sum)
    verdicts = []
    for rank, report in enumerate(reports):
        want = {"gradient": array_digest(gradients[rank]), **shared}
        differ = [name for name, digest in want.items() if report["digests"].get(name) != digest]
        if differ:
            verdicts.append(Verdict(False, float("inf"), f"{', '.join(differ)} differ from the replay's (rank {ARRAYS_RANK}'s verified result)"))
        else:
            verdicts.append(verdict)
    return verdicts


def training_report(summary: dict[str, Any]) -> str:
    """The all-reduce table of every step, then the learning curves' table."""
    return format_table(summary) + "\n" + format_training_table(summary)


KIND = ExperimentKind(
    name="training",
    writer=TrainingResultsWriter,
    runner=TrainingRunner,
    unit="step",
    units=lambda experiment: experiment.data["workload"]["steps"] * len(experiment.data["methods"]),
    report=training_report,
)
"""Each method trains the model step by step; each step's all-reduce is one job."""
