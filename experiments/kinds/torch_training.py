"""Running a ``torch`` workload: a PyTorch model trained with DistributedDataParallel on the
emulated hosts, once per method: an in-network method's communication hook (SwitchML's,
ATP's: the switch's all-reduce over the protocol's client), and Gloo's own all-reduce.

Before the network is built, the exact reference is replayed in this process
(experiments/kinds/torch_replay.py: the ranks' gradients averaged in float64) and its
learning curve written as the ``exact`` series. Then, per method, one DDP rank per host
trains step by step (hosts/torch_training.py), released by the runner as the numpy
training is (experiments/kinds/training.py's ``StepTrainingRunner``). The runner cannot
compute the ranks' gradients itself (torch's kernels are theirs), so each rank reports its
buckets' gradients, and every step is checked from them (``verify_torch_step``): each
bucket's all-reduce as any all-reduce is -- an in-network method's integer sums bit for bit
against the inputs quantized as its protocol quantizes them (SwitchML's block floating
point, ATP's job-wide scale: ``methods.own_sums``), Gloo's average within the float32
summation bound -- and every rank
must hold rank 0's parameters (digests), which are compared with the exact replay's.

torch is imported when a runner is built, never when this module is: the kinds registry
imports it on every machine.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from experiments.harness import ExperimentKind
from experiments.kinds.training import Evaluation, StepTrainingRunner, step_row, training_report
from experiments.kinds.training_results import EXACT, TrainingResultsWriter
from methods.verification import OwnSum, Verdict, expected_for
from hosts.training import ARRAYS_RANK
import methods
from workloads.training import array_digest

if TYPE_CHECKING:
    from experiments.kinds.torch_replay import TorchTrajectory


class TorchTrainingRunner(StepTrainingRunner):
    """The DDP training: the exact replay offline, then each method's training on the network."""

    def _record_references(self) -> TorchTrajectory:
        from experiments.kinds.torch_replay import exact_replay

        exact = exact_replay(self.config, self.data, self.n_workers)
        if not self.writer.series_complete(EXACT, self.config.steps):
            self.writer.discard_series(EXACT)
            self.writer.add_training_steps([step_row(EXACT, EXACT, "offline", None, step, tuple(exact.evaluations[step]), 0.0, None)
                                            for step in range(self.config.steps + 1)])
        return exact

    def _step_check(self, method: str, exact: TorchTrajectory) -> ReportCheck:
        return ReportCheck(method, self.point.job.k, exact, methods.own_sums(self.point.methods, self.point.protocol))


class ReportCheck:
    """A DDP method's steps checked from its ranks' reports, against the exact replay."""

    def __init__(self, method: str, k: int, exact: TorchTrajectory, own: Mapping[str, OwnSum]) -> None:
        self.method = method
        self.k = k
        self.exact = exact
        self.own = own

    def start(self) -> tuple[Evaluation, float]:
        """DDP starts every rank from rank 0's parameters, which are the replay's (the same seeded model)."""
        return tuple(self.exact.evaluations[0]), 0.0

    def step(self, step: int, reports: list[dict[str, Any]]) -> tuple[list[Verdict], Evaluation, float]:
        verdicts, params = verify_torch_step(self.method, reports, self.k, self.own)
        diff = float(np.max(np.abs(params.astype(np.float64) - self.exact.params[step])))
        return verdicts, tuple(reports[ARRAYS_RANK]["evaluation"]), diff


def take_arrays(path: str) -> list[np.ndarray]:
    """The arrays of a worker's .npz (saved in order), the file removed once read."""
    with np.load(path) as saved:
        arrays = [saved[f"arr_{i}"] for i in range(len(saved.files))]
    Path(path).unlink()
    return arrays


def take_sums(report: dict[str, Any]) -> dict[str, np.ndarray]:
    """Rank 0's sums file (every bucket's result), the file removed once read."""
    with np.load(report["sums"]) as saved:
        sums = {name: saved[name] for name in saved.files}
    Path(report["sums"]).unlink()
    return sums


def verify_buckets(method: str, reports: list[dict[str, Any]], k: int, own: Mapping[str, OwnSum] | None = None,
                   shared: dict[str, str] | None = None) -> list[Verdict]:
    """Every rank's verdict on one backward pass's all-reduces, from its reports' bucket files.

    Each bucket's expected sum comes from every rank's inputs (protocol/quantize.py's, and
    ``own``'s for a protocol that quantizes its own way: ``methods.own_sums``, as the sweep
    verifies); rank 0's result is verified as the method's results are. Gloo's hook returns
    the average: multiplied back by n (exact in float64), it is checked against the float64
    sum with the bound of n + 1 float32 roundings (the division by n before the sum is one
    more); a process group's records (``sum<i>``, a user's script) are sums, checked as they are.
    Then every rank's digests must equal those of rank 0's verified integer sums and of
    ``shared`` (name -> digest every rank must report).
    """
    n = len(reports)
    registered = methods.by_name(method)
    inputs = [take_arrays(report["buckets"]) for report in reports]
    sums = take_sums(reports[ARRAYS_RANK])
    if len({len(buckets) for buckets in inputs}) != 1:
        return [Verdict(False, float("inf"), f"the ranks all-reduced different numbers of buckets: {[len(b) for b in inputs]}")] * n
    bucket_verdicts = []
    for index in range(len(inputs[0])):
        expected = expected_for([buckets[index] for buckets in inputs], k, own)
        if registered.aggregation is not None:  # the hook reports the network's integer sums
            verdict = registered.verify(expected, sums[f"values{index}"], sums[f"int_sum{index}"])
        elif f"sum{index}" in sums:  # a process group's float sum (hosts/torch_backend.py)
            verdict = registered.verify(expected, sums[f"sum{index}"], None)
        else:  # DDP's average of a float sum
            total = sums[f"average{index}"].astype(np.float64) * n
            verdict = registered.verify(replace(expected, n_workers=n + 1), total, None)
        bucket_verdicts.append(verdict)
    failed = [(index, v) for index, v in enumerate(bucket_verdicts) if not v.verified]
    if failed:
        index, first = failed[0]
        pass_verdict = Verdict(False, first.max_abs_error, f"bucket {index}: {first.detail}")
    elif bucket_verdicts:
        pass_verdict = Verdict(True, max(v.max_abs_error for v in bucket_verdicts), bucket_verdicts[0].detail)
    else:
        pass_verdict = Verdict(False, float("inf"), "no bucket was all-reduced")
    want = dict(shared or {})
    if registered.aggregation is not None:
        want["int_sum"] = array_digest(np.concatenate([sums[f"int_sum{i}"] for i in range(len(inputs[0]))]))
    verdicts = []
    for report in reports:
        differ = [name for name, digest in want.items() if report["digests"].get(name) != digest]
        verdicts.append(Verdict(False, float("inf"), f"{', '.join(differ)} differ from rank {ARRAYS_RANK}'s")
                        if differ else pass_verdict)
    return verdicts


def verify_torch_step(method: str, reports: list[dict[str, Any]], k: int,
                      own: Mapping[str, OwnSum] | None = None) -> tuple[list[Verdict], np.ndarray]:
    """Every rank's verdict on one DDP step (its buckets, and rank 0's parameters on every
    rank), and rank 0's parameters after it (``own``: as ``verify_buckets``)."""
    params = np.load(reports[ARRAYS_RANK]["parameters"])
    Path(reports[ARRAYS_RANK]["parameters"]).unlink()
    return verify_buckets(method, reports, k, own, {"parameters": array_digest(params)}), params


KIND = ExperimentKind(
    name="torch",
    writer=TrainingResultsWriter,
    runner=TorchTrainingRunner,
    unit="step",
    units=lambda experiment: experiment.data["workload"]["steps"] * len(experiment.data["methods"]),
    report=training_report,
    emulated_only=True,
)
"""Each method trains the model with DDP step by step; each step's all-reduces are one job."""
