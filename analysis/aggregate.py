"""From per-worker rows to per-job numbers and to per-point statistics over repetitions.

A job (one point x method x repetition of a run) is done when its slowest worker has the
result, so its TAT is the max over ranks; rates are recomputed from that TAT rather than
averaged over workers (an average of per-worker rates would flatter a job with one straggler).
Repetitions are summarised by the median (robust to one disturbed repetition on a shared
emulation host) with min/max and the inter-quartile range as spread.
"""

from __future__ import annotations

import pandas as pd

from analysis import models
from experiments.metrics import JOB_KEYS
import methods

# Per-job configuration: identical on every worker row of a job.
JOB_CONFIG = [
    "sweep_param", "sweep_value", "n_workers", "elements", "dtype", "tensor_bytes", "k",
    "pool_size", "link_mbps", "loss", "loss_mechanism", "compute_s", "workload",
]  # fmt: skip
JOB_COUNTS = ["packets_sent", "packets_received", "retransmissions", "timeouts", "duplicates"]


def job_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per job: TAT = slowest worker, ATE/s, algbw and busbw from that TAT.

    Packet counters are summed over workers and ``verified`` is true only if every worker
    verified its result.
    """
    grouped = runs.groupby(JOB_KEYS, sort=True)
    jobs = grouped[JOB_CONFIG].first()
    jobs["tat_s"] = grouped["tat_s"].max()
    jobs[JOB_COUNTS] = grouped[JOB_COUNTS].sum()
    jobs["verified"] = grouped["verified"].all()
    jobs["workers_reporting"] = grouped["rank"].nunique()
    jobs["element_bytes"] = jobs["tensor_bytes"] // jobs["elements"]
    jobs["ate_per_s"] = jobs["elements"] / jobs["tat_s"]
    jobs["algbw_bytes_per_s"] = jobs["tensor_bytes"] / jobs["tat_s"]
    jobs["busbw_bytes_per_s"] = [
        models.busbw(algbw, int(n)) for algbw, n in zip(jobs["algbw_bytes_per_s"], jobs["n_workers"], strict=True)
    ]
    return jobs.reset_index()


def summarize(jobs: pd.DataFrame, by: list[str], value: str) -> pd.DataFrame:
    """Median, min, max, quartiles and count of ``value`` over the jobs in each ``by`` group."""
    grouped = jobs.groupby(by, sort=True)[value]
    stats = pd.DataFrame(
        {
            f"{value}_median": grouped.median(),
            f"{value}_min": grouped.min(),
            f"{value}_max": grouped.max(),
            f"{value}_q25": grouped.quantile(0.25),
            f"{value}_q75": grouped.quantile(0.75),
            "repetitions": grouped.count(),
        }
    )
    return stats.reset_index()


SWEEP_PRIORITY = ("workload", "n_workers", "pool_size", "loss", "elements")
"""Columns a figure can sweep, in the order that decides which one a run sweeps."""


def swept_column(runs: pd.DataFrame) -> str | None:
    """Which runs.csv column the rows of one run sweep, or None for a run without a sweep.

    runs.csv names the sweep in ``sweep_param``, but the runner writes the config path it
    overrides (``topology.workers``, ``workload.model``), not a column name, so a sweep is
    recognised by the column whose value changes between points. Several can change
    together (a workload sweep changes the tensor size too), so the first varying column in
    ``SWEEP_PRIORITY`` wins: the one whose change explains the others'. A ``sweep_param``
    that already is a column name is taken as it is.
    """
    params = set(runs["sweep_param"])
    if params <= {""}:
        return None
    if len(params) == 1 and (param := params.pop()) in SWEEP_PRIORITY:
        return param
    per_point = runs.groupby("point")[list(SWEEP_PRIORITY)].first()
    return next((column for column in SWEEP_PRIORITY if per_point[column].nunique() > 1), None)


TOPOLOGY_SWEEP = "topology"
"""A config's sweep of whole topologies (configs/hierarchical.yaml: spine vs hierarchical
aggregation, lossy and over-subscribed uplinks): its points differ in more than the column
that happens to vary in runs.csv, so it is no sweep of that column for a paper figure."""


def _one_network(runs: pd.DataFrame) -> pd.DataFrame:
    """The rows of runs that do not sweep whole topologies."""
    return runs[runs["sweep_param"].fillna("") != TOPOLOGY_SWEEP]


def runs_sweeping(runs: pd.DataFrame, column: str) -> list[str]:
    """The ``run`` ids whose points sweep ``column`` (and nothing else of the network)."""
    return [run for run, rows in _one_network(runs).groupby("run", sort=True) if swept_column(rows) == column]


def runs_with_lossy_switchml(runs: pd.DataFrame) -> list[str]:
    """The ``run`` ids with a SwitchML job at loss > 0, whether or not the run sweeps loss.

    A loss timeline shows one job, so a single-point run at 1 % loss (configs/loss_timeline.yaml)
    serves as well as the lossiest point of a loss sweep.
    """
    runs = _one_network(runs)
    lossy = runs[(runs["method"] == methods.SWITCHML.name) & (runs["loss"] > 0)]
    return sorted(set(lossy["run"]))


def runs_training(runs: pd.DataFrame, workload: str = "training") -> list[str]:
    """The ``run`` ids of training runs of one workload kind (``training``: the numpy MLP;
    ``torch``: a DDP training), whose steps are one job each."""
    return sorted(set(runs.loc[runs["workload"] == workload, "run"]))
