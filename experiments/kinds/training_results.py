"""The tables of a training run (docs/results-format.md, "Training runs").

A training run writes every table an all-reduce run writes -- each step's all-reduce is
a job, so runs.csv and timeline.csv have one repetition per step (1..steps) -- plus the
per-step learning curves of every series (the network's methods, the exact reference, the
quantization ablation) in training_steps.csv, and one row per series in
training_summary.csv. The switch counters, frame accounting and CPU shares are measured
over a method's whole training and recorded as its repetition 0. As for any run, rows are
appended as steps finish (an interrupted method is discarded and rerun on --resume) and
the summary is computed from the tables at the end.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd

from experiments.config import Point
from experiments.job_meter import JobMeasurement
from experiments.results import CPU_SATURATED, MACHINE_SATURATED, ResultsWriter, kept_up_warning
from protocol import results_format as fmt
import methods
from protocol.results_format import is_machine

EXACT = "exact"
"""The series of the exact reference (float64 sums, replayed offline)."""
WHOLE_TRAINING = 0
"""The repetition under which switch counters, frames and CPU shares of a whole training are recorded."""


def ablation_series(bits: int) -> str:
    return f"{methods.SWITCHML.name} {bits}-bit"


class TrainingResultsWriter(ResultsWriter):
    """ResultsWriter with the training tables; ``add_repetition`` records each step's all-reduce."""

    def series_complete(self, series: str, steps: int) -> bool:
        """True when training_steps.csv holds every step (0..steps) of ``series``."""
        path = self.run_dir / fmt.TRAINING_STEPS.file
        if not path.exists():
            return False
        table = pd.read_csv(path, keep_default_na=False)
        return int((table["series"] == series).sum()) == steps + 1

    def discard_series(self, series: str) -> None:
        path = self.run_dir / fmt.TRAINING_STEPS.file
        if path.exists():
            table = pd.read_csv(path, keep_default_na=False)
            keep = table["series"] != series
            if not keep.all():
                table[keep].to_csv(path, index=False)

    def discard(self, point: int, method: str) -> None:
        """Every row of an interrupted method's training, in all tables."""
        super().discard(point, method)
        self.discard_series(method)

    def add_training_steps(self, rows: list[dict[str, Any]]) -> None:
        self._append(fmt.TRAINING_STEPS, rows)

    def add_whole_training(self, point: Point, method: str, measured: JobMeasurement, loss_mechanism: str) -> None:
        """Switch counters, frames and CPU shares over a method's training, as its repetition 0."""
        self.add_repetition(point, method, WHOLE_TRAINING, [], [], measured, loss_mechanism)

    def finalize(self, verified: bool) -> dict[str, Any]:
        """summary.json as for any run, plus ``training`` (training_summary.csv's rows); CPU
        saturation over a whole training also turns ``kept_up`` false."""
        summary = super().finalize(verified)
        target = float(self.experiment.points[0].workload["target_accuracy"])
        steps = pd.read_csv(self.run_dir / fmt.TRAINING_STEPS.file)
        table = training_summary(steps, target)
        table.to_csv(self.run_dir / fmt.TRAINING_SUMMARY.file, index=False)
        fidelity = pd.read_csv(self.run_dir / fmt.FIDELITY.file)
        whole = fidelity[fidelity["repetition"] == WHOLE_TRAINING]
        machines = whole["host"].map(is_machine).astype(bool)
        busy = whole[(~machines & (whole["cpu_busy_fraction"] >= CPU_SATURATED))
                     | (machines & (whole["cpu_busy_fraction"] >= MACHINE_SATURATED))]
        summary["saturated_trainings"] = busy[["method", "host", "cpu_busy_fraction"]].to_dict("records")
        summary["kept_up"] = bool(summary["kept_up"] and busy.empty)
        machine = whole.loc[machines, "cpu_busy_fraction"]
        if len(machine):  # steps are too short to measure CPU shares one by one: take the trainings'
            summary["max_machine_busy_fraction"] = round(float(machine.max()), 3)
        summary["verified"] = bool(summary["verified"] and table.loc[table["source"] == "network", "verified"].all())
        summary["training"] = json.loads(table.to_json(orient="records"))
        self.write_summary(summary)
        return summary


def training_summary(steps: pd.DataFrame, target_accuracy: float) -> pd.DataFrame:
    """One row per series: final numbers, distance to the exact reference, time to target."""
    exact_final = steps[(steps["series"] == EXACT)].sort_values("step").iloc[-1]
    rows = []
    for series, rows_of in steps.groupby("series", sort=False):
        ordered = rows_of.sort_values("step")
        final = ordered.iloc[-1]
        reached = ordered[ordered["test_accuracy"] >= target_accuracy]
        network = final["source"] == "network"
        rows.append({
            "series": series, "method": final["method"], "source": final["source"], "bits": final["bits"],
            "steps": int(final["step"]), "final_loss": final["loss"], "final_train_accuracy": final["train_accuracy"],
            "final_test_accuracy": final["test_accuracy"],
            "test_accuracy_diff_pp": 100.0 * (final["test_accuracy"] - exact_final["test_accuracy"]),
            "final_param_diff": final["max_param_diff"], "max_param_diff": ordered["max_param_diff"].max(),
            "target_accuracy": target_accuracy,
            "steps_to_target": int(reached["step"].iloc[0]) if len(reached) else np.nan,
            "time_to_target_s": reached["emulated_time_s"].iloc[0] if len(reached) and network else np.nan,
            "emulated_time_s": final["emulated_time_s"] if network else np.nan,
            "allreduce_s_median": ordered["allreduce_s"].median() if network else np.nan,
            "verified": bool(ordered.loc[ordered["step"] > 0, "verified"].astype(str).eq("True").all()) if network else np.nan,
        })
    return pd.DataFrame(rows, columns=list(fmt.TRAINING_SUMMARY.columns))


def format_training_table(summary: dict[str, Any]) -> str:
    """The table printed at the end of a training run: accuracy per series against exact."""
    lines = [f"  {'series':<16} {'test acc':>8} {'vs exact':>9} {'max |Δθ|':>9} {'to target':>9} {'time s':>7} {'verified':>8}"]
    for row in summary["training"]:
        steps = "" if row["steps_to_target"] is None else f"{row['steps_to_target']:.0f}"
        time_text = "" if row["time_to_target_s"] is None else f"{row['time_to_target_s']:.1f}"
        verified = "offline" if row["source"] == "offline" else str(row["verified"])
        lines.append(
            f"  {row['series']:<16} {row['final_test_accuracy']:>8.2%} {row['test_accuracy_diff_pp']:>+7.2f}pp "
            f"{row['max_param_diff']:>9.2e} {steps:>9} {time_text:>7} {verified:>8}"
        )
    lines.append(f"  (target test accuracy {summary['training'][0]['target_accuracy']:.0%}: steps and emulated seconds to reach it)")
    if not summary["kept_up"]:
        lines.append(kept_up_warning(summary))
    return "\n".join(lines)
