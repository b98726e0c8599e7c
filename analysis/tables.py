"""The numbers behind each figure: measured statistics side by side with the analytic models.

Each ``*_table`` function takes the ``Results`` of one run and returns the tidy table its
figure draws, and which ``python -m analysis`` writes next to the figure as CSV, so a
reader can check every plotted point and model line without re-running anything.
A table raises ``MissingData`` when the run lacks what the figure needs.
"""

from __future__ import annotations

import pandas as pd

from analysis import models
from analysis.aggregate import job_table, runs_sweeping, runs_with_lossy_switchml, summarize
from analysis.load import Results
import methods
from methods.ring import RING
from protocol.params import mbps_to_bps

TIMELINE_BIN_MS = 10.0
"""timeline.csv's bin in runs that predate its ``bin_ms`` column (docs/results-format.md)."""
MIN_TIMELINE_BINS = 20
"""Fewer bins than this over a job show no shape; the recorder makes short jobs' bins finer
(hosts/stats.py, timeline_bin_for)."""
MAX_TIMELINE_BINS = 200
"""More than this, and a timeline is merged into wider bins (a 1-2-5 multiple of its own)."""
MERGE_STEPS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
REFERENCE_LINK_BPS = 100e9
"""Link rate of the paper's testbed; the training figure dilates compute times to it."""
SUBJECT = methods.SWITCHML
"""The method under study (the registry's): the figures' line-rate bound, loss timeline and
training speedups are its, against the baselines."""
SWITCHML = SUBJECT.name
BASELINES = tuple(method.name for method in methods.BASELINES)


class MissingData(LookupError):
    """The results do not contain what a figure needs."""


def sweep_jobs(results: Results, column: str) -> pd.DataFrame:
    """Per-job rows of the runs that sweep ``column`` (see ``aggregate.swept_column``)."""
    runs = results.runs[results.runs["run"].isin(runs_sweeping(results.runs, column))]
    if runs.empty:
        raise MissingData(f"no run sweeps {column}")
    return job_table(runs)


def ate_vs_workers_table(results: Results) -> pd.DataFrame:
    """ATE/s per method and worker count, with both bounds and everything normalised by line rate."""
    return _rate_table(results, "n_workers")


def pool_size_table(results: Results) -> pd.DataFrame:
    """ATE/s per method and pool size, with the line-rate bound it should saturate at."""
    return _rate_table(results, "pool_size")


def tat_vs_size_table(results: Results) -> pd.DataFrame:
    """TAT per method and tensor size, with the TAT each bound implies (elements / bound)."""
    stats = _with_bounds(summarize(sweep_jobs(results, "elements"), _point_keys("elements"), "tat_s"))
    stats["line_rate_bound_tat_s"] = stats["elements"] / stats["line_rate_bound_ate_per_s"]
    stats["ring_bound_tat_s"] = stats["elements"] / stats["ring_bound_ate_per_s"]
    return stats


def tat_inflation_table(results: Results) -> pd.DataFrame:
    """TAT(loss) / TAT(0) per method and loss rate; TAT(0) is the method's median at loss 0."""
    jobs = sweep_jobs(results, "loss")
    lossless = jobs[jobs["loss"] == 0].groupby("method")["tat_s"].median()
    lacking = sorted(set(jobs["method"]) - set(lossless.index))
    if lacking:
        raise MissingData(f"no loss=0 point to normalise by for {', '.join(lacking)}")
    jobs["inflation"] = jobs["tat_s"] / jobs["method"].map(lossless)
    return summarize(jobs, ["method", "loss", "loss_mechanism", "n_workers", "link_mbps"], "inflation")


def loss_timeline_table(results: Results) -> pd.DataFrame:
    """Packets each worker sent per 10 ms in one SwitchML job at the highest loss rate.

    The job shown is the first repetition of that point: a timeline is one execution, and
    averaging timelines would smear out exactly the retransmission stalls it is meant to show.
    Any run with a lossy SwitchML job qualifies, a single point as well as a loss sweep.
    """
    runs = results.runs[results.runs["run"].isin(runs_with_lossy_switchml(results.runs))]
    if runs.empty:
        raise MissingData(f"no {SUBJECT.label} job with loss > 0")
    jobs = job_table(runs)
    jobs = jobs[(jobs["method"] == SWITCHML) & (jobs["loss"] > 0)]
    _require_link_rate(jobs)
    job = jobs.sort_values(["loss", "repetition"], ascending=[False, True]).iloc[0]
    timeline = results.timeline
    selected = timeline[
        (timeline["run"] == job["run"])
        & (timeline["point"] == job["point"])
        & (timeline["method"] == job["method"])
        & (timeline["repetition"] == job["repetition"])
    ]
    if selected.empty:
        raise MissingData(f"timeline.csv has no rows for point {job['point']} of {job['run']}")
    recorded = float(selected["bin_ms"].iloc[0]) if "bin_ms" in selected and selected["bin_ms"].notna().all() else TIMELINE_BIN_MS
    table = merged_bins(selected[["rank", "t_ms", "packets_sent"]], recorded)
    table = table.assign(
        point=job["point"], repetition=job["repetition"], loss=job["loss"], loss_mechanism=job["loss_mechanism"]
    )
    link_bytes_per_bin = mbps_to_bps(job["link_mbps"]) * table["bin_ms"].iloc[0] / 1000 / models.BITS_PER_BYTE
    table["line_rate_packets_per_bin"] = link_bytes_per_bin / SUBJECT.aggregation.frame_bytes(int(job["k"]))
    return table


def merged_bins(timeline: pd.DataFrame, bin_ms: float) -> pd.DataFrame:
    """``timeline`` (rank, t_ms, packets_sent in bins of ``bin_ms``) in bins wide enough that
    the job has at most MAX_TIMELINE_BINS: the recorded bins merged by the smallest factor
    of MERGE_STEPS that does it; with a ``bin_ms`` column."""
    span = timeline["t_ms"].max() + bin_ms
    factor = next((step for step in MERGE_STEPS if span / (bin_ms * step) <= MAX_TIMELINE_BINS), MERGE_STEPS[-1])
    width = bin_ms * factor
    merged = timeline.assign(t_ms=(timeline["t_ms"] // width * width).round(6))
    table = merged.groupby(["rank", "t_ms"], as_index=False)["packets_sent"].sum()
    return table.sort_values(["rank", "t_ms"]).reset_index(drop=True).assign(bin_ms=width)


def training_speedup_table(results: Results, reference_link_bps: float = REFERENCE_LINK_BPS) -> pd.DataFrame:
    """Per workload and baseline: training speedup of SwitchML from measured comm and compute times.

    Communication time per iteration is the job TAT of all-reducing the workload's gradients
    (median over repetitions); the spread combines the extremes (best baseline with worst
    SwitchML and vice versa). runs.csv ``compute_s`` is already multiplied by the config's
    time-dilation factor and size scale; both are carried along (``dilation``,
    ``size_scale``), the dilation next to the factor the link rates call for
    (``link_slowdown`` = reference / emulated rate), so the figure can show them.
    ``expected_speedup`` is the 2(n-1)/n model applied to the measured ring time.
    """
    jobs = sweep_jobs(results, "workload")
    comm = summarize(jobs, ["run", "workload", "method", "n_workers", "link_mbps", "compute_s"], "tat_s")
    switchml = comm[comm["method"] == SWITCHML].set_index("workload")
    baselines = comm[comm["method"].isin(BASELINES)]
    if switchml.empty or baselines.empty:
        raise MissingData(f"training speedup needs {SUBJECT.label} and a ring or PS baseline")
    _require_link_rate(comm)
    scaling = results.summary.set_index("run")[["time_dilation", "size_scale"]]
    rows = []
    for base in baselines.itertuples(index=False):
        if base.workload not in switchml.index:
            continue
        sml = switchml.loc[base.workload]
        compute = base.compute_s
        expected = models.expected_training_speedup_over_ring(compute, base.tat_s_median, int(base.n_workers))
        rows.append(
            {
                "workload": base.workload,
                "baseline": base.method,
                "n_workers": base.n_workers,
                "link_mbps": base.link_mbps,
                "reference_link_gbps": reference_link_bps / 1e9,
                "link_slowdown": models.time_dilation_factor(reference_link_bps, mbps_to_bps(base.link_mbps)),
                "dilation": scaling.at[base.run, "time_dilation"],
                "size_scale": scaling.at[base.run, "size_scale"],
                "compute_s": compute,
                "comm_baseline_s": base.tat_s_median,
                f"comm_{SWITCHML}_s": sml["tat_s_median"],
                "speedup_median": models.training_speedup(compute, base.tat_s_median, sml["tat_s_median"]),
                "speedup_min": models.training_speedup(compute, base.tat_s_min, sml["tat_s_max"]),
                "speedup_max": models.training_speedup(compute, base.tat_s_max, sml["tat_s_min"]),
                "expected_speedup": expected if base.method == RING.name else float("nan"),  # the model is the ring's
            }
        )
    if not rows:
        raise MissingData(f"no workload was measured with both {SUBJECT.label} and a baseline")
    return pd.DataFrame(rows)


def training_convergence_table(results: Results) -> pd.DataFrame:
    """Per series (network methods, exact reference, ablation) and step: the learning curves.

    The rows are training_steps.csv's: loss and accuracies of the parameters after each step,
    their largest distance to the exact reference's (``max_param_diff``), and for the
    network's methods the measured times (``emulated_time_s`` accumulates the slowest
    worker's compute + all-reduce per step); ``n_workers`` from runs.csv. ``run`` is
    dropped: the table is one run's.
    """
    training = results.training
    if training.empty:
        raise MissingData("the run has no training_steps.csv")
    if "exact" not in set(training["series"]):
        raise MissingData("training_steps.csv has no exact reference")
    columns = ["series", "method", "source", "bits", "step", "loss", "train_accuracy", "test_accuracy",
               "max_param_diff", "allreduce_s", "emulated_time_s"]
    table = training[columns].reset_index(drop=True)
    table["n_workers"] = int(results.runs["n_workers"].max())
    return table


def _require_link_rate(stats: pd.DataFrame) -> None:
    """Bounds and dilation are relative to the link rate: without shaping there is nothing to draw."""
    if stats["link_mbps"].isna().any():
        raise MissingData("links were not rate-limited (link_mbps empty): no line-rate bound to compare with")


def _point_keys(x: str) -> list[str]:
    """Group keys of a sweep over ``x``: method, x, and what the bounds depend on."""
    return ["method", x, *(key for key in ("n_workers", "link_mbps", "k", "element_bytes") if key != x)]


def _rate_table(results: Results, x: str) -> pd.DataFrame:
    """ATE/s statistics over a sweep of ``x`` with both bounds, normalised by line rate."""
    stats = summarize(sweep_jobs(results, x), _point_keys(x), "ate_per_s")
    return _normalise(_with_bounds(stats), "ate_per_s")


def _with_bounds(stats: pd.DataFrame) -> pd.DataFrame:
    """Add the method under study's line-rate and the ring's ATE/s bounds for each row's link rate, k and n."""
    _require_link_rate(stats)
    link_bps = mbps_to_bps(stats["link_mbps"])
    stats["line_rate_bound_ate_per_s"] = [
        SUBJECT.bound(bps, int(n), int(k)) for bps, n, k in zip(link_bps, stats["n_workers"], stats["k"], strict=True)
    ]
    stats["ring_bound_ate_per_s"] = [
        models.ring_ate_bound(bps, int(n), int(size))
        for bps, n, size in zip(link_bps, stats["n_workers"], stats["element_bytes"], strict=True)
    ]
    return stats


def _normalise(stats: pd.DataFrame, value: str) -> pd.DataFrame:
    """Divide the statistics of ``value`` and the ring bound by the line-rate bound."""
    bound = stats["line_rate_bound_ate_per_s"]
    for stat in ("median", "min", "max", "q25", "q75"):
        stats[f"normalised_{stat}"] = stats[f"{value}_{stat}"] / bound
    stats["ring_bound_normalised"] = stats["ring_bound_ate_per_s"] / bound
    return stats
