"""Per-job metrics, named as runs.csv names them (docs/results-format.md), and the tables over
a run's rows that both the runner's summary and the analysis compute (the analysis sits
above, reading what the runner wrote, and imports them from here).

TAT (tensor aggregation time) of a job is its slowest worker's; ATE/s = elements / TAT;
algbw = tensor bytes / TAT. Bounds and busbw are analytic models and live, derived, in
methods/ (each method's bound and pace), which analysis/models.py gathers for the figures.
"""

from __future__ import annotations

import pandas as pd

JOB_KEYS = ["run", "point", "method", "repetition"]
"""What names one job in the analysis' tables (the runner's lack ``run``: one run)."""


def ate_per_s(elements: int, tat_s: float) -> float:
    return elements / tat_s if tat_s > 0 else float("nan")


def algbw_bytes_per_s(tensor_bytes: int, tat_s: float) -> float:
    return tensor_bytes / tat_s if tat_s > 0 else float("nan")


MIN_CPU_SAMPLE_S = 0.2
"""Shortest job whose cpu_busy_fraction (fidelity.csv) says anything.

/proc counts CPU time in ticks of 10 ms (CLK_TCK = 100), so a worker busy for one tick
more or less in a 10 ms job shows 0 % or over 100 % of a core: a 1,024-element all-reduce
would always look saturated. From 0.2 s one tick moves the share by at most 5 %."""


def timed_cpu_samples(fidelity: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The fidelity.csv rows of jobs that lasted at least ``MIN_CPU_SAMPLE_S`` (job TAT, slowest worker).

    Works on one run's tables (the runner's, keyed by point, method, repetition) and on the
    analysis' (which add ``run``).
    """
    keys = [key for key in JOB_KEYS if key in fidelity.columns and key in runs.columns]
    tats = runs.groupby(keys, as_index=False)["tat_s"].max()
    long_enough = fidelity.merge(tats, on=keys, how="left")["tat_s"] >= MIN_CPU_SAMPLE_S
    return fidelity[long_enough.to_numpy()]


def shared_switch_jobs(rows: pd.DataFrame) -> pd.DataFrame:
    """A shared-switch run's jobs.csv rows -> one row per (point, repetition, job): the job ends when its slowest worker does."""
    jobs = rows.groupby(["point", "n_jobs", "repetition", "job_id"], as_index=False).agg(
        tat_s=("tat_s", "max"), released_s=("released_s", "first"), elements=("elements", "first"),
        n_workers=("n_workers", "first"), pool_size=("pool_size", "first"), start_s=("start_s", "first"),
        verified=("verified", "all"),
    )
    jobs["ate_per_s"] = jobs["elements"] / jobs["tat_s"]
    return jobs


def shared_switch_totals(jobs: pd.DataFrame) -> pd.DataFrame:
    """Per (point, repetition): every job's elements over the makespan (first release to last end)."""
    ends = jobs.assign(end_s=jobs["released_s"] + jobs["tat_s"])
    totals = ends.groupby(["point", "n_jobs", "repetition"], as_index=False).agg(
        elements=("elements", "sum"), first_s=("released_s", "min"), end_s=("end_s", "max"),
    )
    totals["makespan_s"] = totals["end_s"] - totals["first_s"]
    totals["total_ate_per_s"] = totals["elements"] / totals["makespan_s"]
    return totals
