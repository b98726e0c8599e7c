"""Read result directories (docs/results-format.md) into tidy pandas DataFrames.

A *run* is one directory written by ``run_experiment.py`` (it holds ``runs.csv`` and
``summary.json``). ``load_results`` accepts runs or any parent of runs (``results/``,
``results/<config>/``) and concatenates everything, adding a ``run`` column (the run's path
relative to the directory it was found under) so rows from different runs never mix.

Validation is strict on purpose: a figure drawn from a half-written or older-format run is
worse than no figure, so a missing file or column raises ``ResultsFormatError`` naming both.
A run without ``summary.json`` is one that was interrupted or failed (the summary is the
last file a run writes): it is skipped with a warning that says how to finish it, so one
stopped run does not keep every figure from being drawn.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

import methods
from protocol import results_format as fmt
from protocol.results_format import resume_command

log = logging.getLogger(__name__)

_TABLES = {"runs": fmt.RUNS, "counters": fmt.SWITCH_COUNTERS, "timeline": fmt.TIMELINE, "fidelity": fmt.FIDELITY}
"""The per-job tables every run has, by the name ``Results`` gives them."""
_TEXT_DTYPES = dict.fromkeys(fmt.TEXT_COLUMNS, str)


class ResultsFormatError(ValueError):
    """A results directory does not match docs/results-format.md."""


@dataclass(frozen=True)
class Results:
    """Every table of one or more runs; each frame has a leading ``run`` column.

    ``summary`` has one row per run: the scalar fields of summary.json plus ``path``.
    """

    runs: pd.DataFrame
    counters: pd.DataFrame
    timeline: pd.DataFrame
    fidelity: pd.DataFrame
    summary: pd.DataFrame
    training: pd.DataFrame
    """training_steps.csv of training runs (docs/results-format.md, "Training runs")."""

    def only(self, run: str) -> Results:
        """The same tables restricted to one run."""
        return self._restricted({run})

    def on_clock(self, simulated: bool) -> Results:
        """Only the runs of one clock: the simulated ones (summary.json ``simulated``) or the
        emulated ones, so that a paper-scale simulation never stands in for an emulated figure."""
        flags = simulated_flags(self.summary)
        return self._restricted(set(self.summary.loc[flags == simulated, "run"]))

    def _restricted(self, runs: set[str]) -> Results:
        return Results(**{name: frame[frame["run"].isin(runs)].reset_index(drop=True) for name, frame in self._frames()})

    def _frames(self) -> Iterable[tuple[str, pd.DataFrame]]:
        return (
            ("runs", self.runs),
            ("counters", self.counters),
            ("timeline", self.timeline),
            ("fidelity", self.fidelity),
            ("summary", self.summary),
            ("training", self.training),
        )


def simulated_flags(summary: pd.DataFrame) -> pd.Series:
    """Per summary row, whether the run ran on the simulated clock (runs older than
    summary.json's ``simulated`` are emulated)."""
    if fmt.SIMULATED_KEY not in summary.columns:
        return pd.Series([False] * len(summary), index=summary.index)
    return summary[fmt.SIMULATED_KEY].fillna(False).astype(bool)


def find_runs(path: Path) -> list[Path]:
    """Run directories at or below ``path`` (those holding a runs.csv), sorted."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"results directory {path} does not exist")
    return sorted(csv.parent for csv in path.rglob(fmt.RUNS.file))


def load_results(paths: Iterable[Path | str]) -> Results:
    """Load every run under each of ``paths`` into one ``Results``."""
    roots = [Path(path) for path in paths]
    loaded, incomplete = [], []
    for root in roots:
        runs = find_runs(root)
        if not runs:
            raise ResultsFormatError(f"no {fmt.RUNS.file} at or below {root}")
        for run_dir in runs:
            if not (run_dir / fmt.SUMMARY_FILE).is_file():
                incomplete.append(f"{run_dir}: incomplete (no summary.json: interrupted or failed); finish it with {resume_command(run_dir)}")
                continue
            run_id = run_dir.relative_to(root).as_posix() if run_dir != root else root.name
            loaded.append(load_run(run_dir, run_id))
    if not loaded:
        raise ResultsFormatError(f"no complete run in {', '.join(map(str, roots))}" + "".join(f"; {what}" for what in incomplete))
    for what in incomplete:
        log.warning("skipped %s", what)
    log.info("loaded %d run(s)", len(loaded))
    return Results(**{name: pd.concat([r[name] for r in loaded], ignore_index=True) for name in loaded[0]})


def load_run(run_dir: Path, run_id: str) -> dict[str, pd.DataFrame]:
    """The tables of one run directory, each with ``run`` = ``run_id`` as first column."""
    tables = {name: _read_table(run_dir / table.file, table.required) for name, table in _TABLES.items()}
    tables["training"] = _read_training(run_dir / fmt.TRAINING_STEPS.file)
    tables["summary"] = _read_summary(run_dir / fmt.SUMMARY_FILE)
    tables["summary"]["time_dilation"], tables["summary"]["size_scale"] = _read_compute_scaling(run_dir / fmt.CONFIG_FILE)
    tables["summary"]["path"] = str(run_dir)
    for frame in tables.values():
        frame.insert(0, "run", run_id)
    return tables


def _read_table(path: Path, required: tuple[str, ...]) -> pd.DataFrame:
    if not path.is_file():
        raise ResultsFormatError(f"{path}: file missing (docs/results-format.md lists it for every run)")
    frame = pd.read_csv(path, dtype=_TEXT_DTYPES)
    missing = [column for column in required if column not in frame.columns]
    if missing:
        raise ResultsFormatError(f"{path}: missing column(s) {', '.join(missing)}")
    text_columns = [column for column in fmt.TEXT_COLUMNS if column in frame.columns]
    frame[text_columns] = frame[text_columns].fillna("")
    unknown = sorted(set(frame["method"]) - set(methods.NAMES)) if "method" in frame.columns else []
    if unknown:
        expected = ", ".join(methods.NAMES)
        raise ResultsFormatError(f"{path}: unknown method(s) {', '.join(unknown)} (expected one of {expected})")
    if "verified" in frame.columns:
        frame["verified"] = frame["verified"].map(_parse_bool)
    return frame


def _read_training(path: Path) -> pd.DataFrame:
    """A training run's learning curves, or an empty frame with their columns for other runs
    (only training runs write training_steps.csv)."""
    if not path.is_file():
        return pd.DataFrame(columns=list(fmt.TRAINING_STEPS.columns))
    frame = pd.read_csv(path, dtype={"series": str, "method": str, "source": str})
    missing = [column for column in fmt.TRAINING_STEPS.required if column not in frame.columns]
    if missing:
        raise ResultsFormatError(f"{path}: missing column(s) {', '.join(missing)}")
    return frame


def _read_summary(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise ResultsFormatError(f"{path}: file missing (docs/results-format.md lists it for every run)")
    summary = json.loads(path.read_text())
    missing = [key for key in fmt.SUMMARY_REQUIRED_KEYS if key not in summary]
    if missing:
        raise ResultsFormatError(f"{path}: missing key(s) {', '.join(missing)}")
    scalars = {key: value for key, value in summary.items() if not isinstance(value, (dict, list))}
    scalars.update({f"shaping_{key}": value for key, value in summary.get("shaping", {}).items()})
    return pd.DataFrame([scalars])


def _read_compute_scaling(path: Path) -> tuple[float, float]:
    """The config's ``workload.time_dilation`` and ``workload.size_scale``.

    runs.csv records compute times after the runner multiplied them by both factors, but
    not the factors themselves; the training figure has to state them, so they are read
    from the resolved config. A missing time_dilation is NaN (not recorded); a missing
    size_scale is 1, because runs written before the key existed were not scaled.
    """
    if not path.is_file():
        raise ResultsFormatError(f"{path}: file missing (docs/results-format.md lists it for every run)")
    config = yaml.safe_load(path.read_text()) or {}
    workload = config.get("workload") if isinstance(config, dict) else None
    if not isinstance(workload, dict):
        return float("nan"), float("nan")
    return float(workload.get("time_dilation", "nan")), float(workload.get("size_scale", 1.0))


def _parse_bool(value: object) -> bool:
    """runs.csv ``verified``: accept the spellings csv writers produce for a bool."""
    text = str(value).strip().lower()
    if text in ("true", "1"):
        return True
    if text in ("false", "0"):
        return False
    raise ResultsFormatError(f"verified must be a bool, got {value!r}")
