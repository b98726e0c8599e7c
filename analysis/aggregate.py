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

JOB_KEYS = ["run", "point", "method", "repetition"]
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
