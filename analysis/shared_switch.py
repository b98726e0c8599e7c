"""Figure ``shared_switch``: throughput per job and in total when 1, 2, 4 jobs share a switch.

``python -m analysis RESULTS...`` draws it from the newest shared-switch run under RESULTS
(jobs.csv + summary.json, written by experiments/kinds/shared_switch.py). Left: each job's ATE/s (median over repetitions, min-max bars) and all
jobs' elements over the makespan, against the number of jobs, with a job's line-rate
bound. Right: how the control plane partitions the switch's slots for each measured set of
jobs, and what it does with the 4-job set at twice the pools (more slots than the switch
has): it refuses admission (``switches.fabric.partition_slots``), it never shrinks a
pool. It writes shared_switch.png, .pdf and .csv (the numbers plotted).
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml
from matplotlib.figure import Figure

from experiments.metrics import shared_switch_jobs, shared_switch_totals
from analysis.multi_tenant import is_multi_tenant
from analysis.run_figure import RunFigure
from analysis.run_figure import newest_run as newest_run_of
from protocol import results_format as fmt
from switches.fabric import AdmissionError, partition_slots

NAME = "shared_switch"
OVERSUBSCRIPTION_FACTOR = 2
"""The refused example: the largest measured set of jobs with every pool this much larger."""


def newest_run(roots: list[Path], simulated: bool | None = None) -> Path:
    """The shared-switch run (summary kind shared_switch, with jobs.csv) started last."""
    return newest_run_of(roots, lambda summary, run: summary.get("kind") == fmt.SHARED_SWITCH_KIND and (run / fmt.JOBS.file).is_file()
                         and not is_multi_tenant(run),  # analysis/multi_tenant.py draws those
                         "shared-switch run (jobs.csv + summary.json)", simulated)


def throughput_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per number of jobs: each job's ATE/s and the total (median, min, max over repetitions)."""
    per_job = shared_switch_jobs(rows).rename(columns={"ate_per_s": "value"})
    per_job["series"] = "job " + per_job["job_id"].astype(str)
    totals = shared_switch_totals(shared_switch_jobs(rows)).rename(columns={"total_ate_per_s": "value"})
    totals["series"] = "total"
    both = pd.concat([per_job[["n_jobs", "series", "repetition", "value"]], totals[["n_jobs", "series", "repetition", "value"]]])
    table = both.groupby(["n_jobs", "series"], as_index=False)["value"].agg(ate_per_s_median="median", ate_per_s_min="min", ate_per_s_max="max")
    return table


def slot_table(config: dict) -> pd.DataFrame:
    """Each measured job set's slot ranges as the control plane assigns them, and the refused set."""
    max_pool = config["switch"]["max_pool_size"]
    sets = config["sweep"]["values"] if config.get("sweep", {}).get("param") == "jobs" else [config["jobs"]]
    largest = max(sets, key=len)
    candidates = [(f"{len(jobs)} job(s)", jobs) for jobs in sets]
    candidates.append((f"{len(largest)} jobs, pools ×{OVERSUBSCRIPTION_FACTOR}",
                       [{**job, "pool_size": job["pool_size"] * OVERSUBSCRIPTION_FACTOR} for job in largest]))
    rows = []
    for label, jobs in candidates:
        pools = [(job["job_id"], job["pool_size"]) for job in jobs]
        try:
            ranges = partition_slots(pools, max_pool)
            rows += [{"job_set": label, "job_id": job_id, "slot_base": r.start, "pool_size": len(r), "admitted": True, "max_pool_size": max_pool}
                     for (job_id, _), r in zip(pools, ranges)]
        except AdmissionError:
            rows += [{"job_set": label, "job_id": job_id, "slot_base": sum(p for _, p in pools[:i]), "pool_size": pool, "admitted": False,
                      "max_pool_size": max_pool} for i, (job_id, pool) in enumerate(pools)]
    return pd.DataFrame(rows)


def draw(throughput: pd.DataFrame, slots: pd.DataFrame, summary: dict) -> Figure:
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[3, 2])
    counts = sorted(throughput["n_jobs"].unique())
    series = sorted(throughput["series"].unique(), key=lambda s: (s == "total", s))
    width = 0.8 / len(series)
    for i, name in enumerate(series):
        rows = throughput[throughput["series"] == name].set_index("n_jobs").reindex(counts)
        x = [counts.index(n) + (i - (len(series) - 1) / 2) * width for n in counts]
        median = rows["ate_per_s_median"]
        err = [median - rows["ate_per_s_min"], rows["ate_per_s_max"] - median]
        left.bar(x, median, width, yerr=err, capsize=2, label=name, color="0.3" if name == "total" else None)
    bound = summary["points"][0].get("line_rate_bound_ate_per_s_per_job")
    if bound:
        left.axhline(bound, color="k", linestyle="--", linewidth=1, label="one job's line-rate bound (model)")
    left.set_xticks(range(len(counts)), [str(n) for n in counts])
    left.set_xlabel("jobs sharing the switch")
    left.set_ylabel("ATE/s (aggregated elements / s)")
    left.legend(fontsize=7, ncol=2, title="median; error bars: min to max over the repetitions", title_fontsize=6)
    left.set_title("per job: its elements / its TAT; total: all elements / makespan", fontsize=8, loc="left")
    sets = list(dict.fromkeys(slots["job_set"]))
    for y, label in enumerate(sets):
        for _, row in slots[slots["job_set"] == label].iterrows():
            colour = "tab:blue" if row["admitted"] else "tab:red"
            right.barh(y, row["pool_size"], left=row["slot_base"], color=colour, edgecolor="white", alpha=0.8 if row["admitted"] else 0.4)
            right.text(row["slot_base"] + row["pool_size"] / 2, y, str(row["job_id"]), ha="center", va="center", fontsize=7)
        if not slots[slots["job_set"] == label]["admitted"].all():
            right.text(0, y + 0.43, "admission refused (AdmissionError)", color="tab:red", fontsize=7, va="bottom")
    max_pool = int(slots["max_pool_size"].iloc[0])
    right.axvline(max_pool, color="k", linestyle="--", linewidth=1)
    right.set_yticks(range(len(sets)), sets, fontsize=8)
    right.set_xlabel(f"register slots per shadow set (switch: {max_pool})")
    right.set_title("slot ranges the control plane assigns (job ids)", fontsize=8, loc="left")
    busy = summary["max_machine_busy_fraction"]
    where = "simulated clock" if fmt.is_simulated(summary) else f"machine at most {busy:.0%} busy"
    title = (f"Jobs sharing one switch ({summary['switch_target']} target, {summary['link_mbps']:g} Mbit/s links)\n"
             f"2 workers per job, each job on its own hosts; {where}")
    if not summary["kept_up"]:
        title += "\nnot kept up: the machine was saturated in some repetitions (jobs.csv: machine_busy_fraction)"
    fig.suptitle(title, color="black" if summary["kept_up"] else "darkred")
    return fig


def figure(run: Path) -> tuple[pd.DataFrame, Figure]:
    """The run's numbers (throughput rows, then slot rows) and the figure."""
    throughput = throughput_table(pd.read_csv(run / fmt.JOBS.file))
    slots = slot_table(yaml.safe_load((run / fmt.CONFIG_FILE).read_text()))
    fig = draw(throughput, slots, json.loads((run / fmt.SUMMARY_FILE).read_text()))
    return pd.concat([throughput.assign(table="throughput"), slots.assign(table="slots")], ignore_index=True), fig


def redraw(table: pd.DataFrame, summary: dict) -> Figure:
    """The figure from its saved numbers (``figure``'s table: throughput rows, then slot rows)."""
    throughput = table[table["table"] == "throughput"].astype({"n_jobs": int})
    slots = table[table["table"] == "slots"].astype({"job_id": int, "slot_base": int, "pool_size": int, "admitted": bool})
    return draw(throughput, slots, summary)


FIGURE = RunFigure(NAME, newest_run, figure, redraw,
                   ("switch_target", "link_mbps", "kept_up", "max_machine_busy_fraction", "points", "simulated"))
