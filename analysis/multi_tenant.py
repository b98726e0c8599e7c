"""Figure ``multi_tenant``: SwitchML's static partition against ATP's shared pool when 1-8
staggered jobs share one switch with the same register budget.

``python -m analysis RESULTS...`` draws it from the newest multi-tenant run (a shared-switch
run whose jobs take their ``share`` of the budget, configs/multi_tenant.yaml and
paper_multi_tenant.yaml) and every run of the same config beside it, the newest per
(method, budget): `make multi-tenant-sim` and `make paper-sim` run both methods over the
budget sweep into one folder. Left: the total ATE/s (all jobs' elements over the makespan)
against the budget, a line per method and job count. Middle: each job's completion time
(its slowest worker's TAT) against the job count at one budget. Right: ATP's shares from its
counters (protocol_counters.csv): chunks whose aggregator another job held (the PS's
``collided_sequences``) and worker packets the switch passed on to the PS instead of
aggregating (its ``partial_sums``). It writes multi_tenant.png, .pdf and .csv.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import yaml
from matplotlib.figure import Figure

import methods
from analysis.run_figure import RunFigure
from analysis.run_figure import newest_run as newest_run_of
from experiments.metrics import shared_switch_jobs, shared_switch_totals
from experiments.results import MACHINE_SATURATED
from protocol import results_format as fmt

NAME = "multi_tenant"
SHARE = "share"  # a job's pool_size that takes its design's part of the budget (experiments/kinds/shared_switch.py)
SHARE_COUNTERS = ("collided_sequences", "sequences_from_switch", "sequences_from_parts", "partial_sums")
"""The shared-pool PS's counts the shares are read from (hosts/atp/parameter_server.py's PSStats)."""
CLAIM = "{label}'s paper (abstract): 38-66 % faster training in a cluster shared by several jobs; no figure numbers as text, compare shapes"


def is_multi_tenant(run: Path) -> bool:
    """A shared-switch run whose jobs take their share of the register budget."""
    config = yaml.safe_load((run / fmt.CONFIG_FILE).read_text())
    return any(job.get("pool_size") == SHARE for job in config.get("jobs") or ())


def newest_run(roots: list[Path], simulated: bool | None = None) -> Path:
    return newest_run_of(roots, lambda summary, run: summary.get("kind") == fmt.SHARED_SWITCH_KIND and (run / fmt.JOBS.file).is_file()
                         and is_multi_tenant(run), "multi-tenant run (shared-switch jobs with pool_size: share)", simulated)


def sibling_runs(run: Path) -> dict[tuple[str, int], Path]:
    """The newest run of ``run``'s config on its clock per (method, budget) in its folder."""
    mine = json.loads((run / fmt.SUMMARY_FILE).read_text())
    found: dict[tuple[str, int], tuple[str, Path]] = {}
    for summary_path in run.parent.glob(f"*/{fmt.SUMMARY_FILE}"):
        summary = json.loads(summary_path.read_text())
        if (summary.get("config") != mine["config"] or fmt.is_simulated(summary) != fmt.is_simulated(mine)
                or not (summary_path.parent / fmt.JOBS.file).is_file()):
            continue
        [method] = yaml.safe_load((summary_path.parent / fmt.CONFIG_FILE).read_text())["methods"]
        key = (method, int(summary["max_pool_size"]))
        if key not in found or found[key][0] < summary["started_utc"]:
            found[key] = (summary["started_utc"], summary_path.parent)
    return {key: folder for key, (_, folder) in sorted(found.items())}


def has_shared_pool_counters(run: Path) -> bool:
    """A run whose servers counted collisions (the shared-pool design's PS)."""
    path = run / fmt.PROTOCOL_COUNTERS.file
    return path.is_file() and set(SHARE_COUNTERS) <= set(pd.read_csv(path)["counter"])


def pool_shares(run: Path, jobs: pd.DataFrame, k: int) -> pd.DataFrame:
    """Per job count: the share of chunks that collided and of worker packets sent to the PS."""
    counters = pd.read_csv(run / fmt.PROTOCOL_COUNTERS.file)
    server = counters[counters["role"] == "server"].pivot_table(index=["point", "repetition"], columns="counter", values="value", aggfunc="sum")
    jobs = jobs.assign(packets=[n * math.ceil(e / k) for n, e in zip(jobs["n_workers"], jobs["elements"])])
    sent = jobs.groupby(["point", "repetition"]).agg(n_jobs=("n_jobs", "first"), packets=("packets", "sum"))
    both = sent.join(server)
    chunks = both["sequences_from_switch"] + both["sequences_from_parts"]
    shares = pd.DataFrame({"n_jobs": both["n_jobs"], "collision_share": both["collided_sequences"] / chunks,
                           "ps_fallback_share": both["partial_sums"] / both["packets"]})
    return shares.groupby("n_jobs", as_index=False).median()


def table(run: Path) -> pd.DataFrame:
    """Rows (method, budget, n_jobs, series, value): each job's TAT, the total ATE/s and makespan, ATP's shares."""
    rows = []
    for (method, budget), folder in sibling_runs(run).items():
        jobs = shared_switch_jobs(pd.read_csv(folder / fmt.JOBS.file))
        totals = shared_switch_totals(jobs).groupby("n_jobs", as_index=False)[["total_ate_per_s", "makespan_s"]].median()
        base = {"method": method, "budget": budget}
        rows += [{**base, "n_jobs": r.n_jobs, "series": "total_ate_per_s", "job_id": "", "pool_size": "", "value": r.total_ate_per_s}
                 for r in totals.itertuples()]
        rows += [{**base, "n_jobs": r.n_jobs, "series": "makespan_s", "job_id": "", "pool_size": "", "value": r.makespan_s}
                 for r in totals.itertuples()]
        per_job = jobs.groupby(["n_jobs", "job_id"], as_index=False).agg(tat_s=("tat_s", "median"), pool_size=("pool_size", "first"))
        rows += [{**base, "n_jobs": r.n_jobs, "series": "job_tat_s", "job_id": r.job_id, "pool_size": r.pool_size, "value": r.tat_s}
                 for r in per_job.itertuples()]
        busy = pd.read_csv(folder / fmt.JOBS.file).groupby("n_jobs", as_index=False)["machine_busy_fraction"].max().dropna()
        rows += [{**base, "n_jobs": r.n_jobs, "series": "machine_busy_fraction", "job_id": "", "pool_size": "", "value": r.machine_busy_fraction}
                 for r in busy.itertuples()]
        if has_shared_pool_counters(folder):
            k = int(pd.read_csv(folder / fmt.JOBS.file)["k"].iloc[0])
            for r in pool_shares(folder, jobs, k).itertuples():
                rows += [{**base, "n_jobs": r.n_jobs, "series": name, "job_id": "", "pool_size": "", "value": getattr(r, name)}
                         for name in ("collision_share", "ps_fallback_share")]
    return pd.DataFrame(rows).astype({"n_jobs": int, "budget": int})


def clock_stamp(numbers: pd.DataFrame, summary: dict) -> str:
    """Which clock the runs are on; for emulated runs their switch target and whether every
    run kept up (the machine's busy share below ``MACHINE_SATURATED`` in every repetition)."""
    if fmt.is_simulated(summary):
        return "simulated clock"
    busy = numbers[numbers["series"] == "machine_busy_fraction"]["value"].max()
    kept_up = "every run kept up" if busy < MACHINE_SATURATED else "NOT every run kept up"
    return f"emulated, {summary['switch_target']} switch; {kept_up}: machine busy at most {busy:.0%}"


def draw(numbers: pd.DataFrame, summary: dict) -> Figure:
    fig = Figure(figsize=(14, 4.6), layout="constrained")
    total, completion, shares = fig.subplots(1, 3)
    counts = sorted(numbers["n_jobs"].unique())
    budgets = sorted(numbers["budget"].unique())
    shown = budgets[len(budgets) // 2]
    styles = ["-", "--", "-.", ":"]
    shared = sorted(method for method in numbers["method"].unique() if methods.by_name(method).aggregation.pool_sharing.partition is None)
    counted = (numbers["series"] == "collision_share").any()
    for order, (method, per_method) in enumerate(numbers.groupby("method")):
        colour = methods.by_name(method).colour
        label = methods.by_name(method).label
        for style, n in zip(styles, counts):
            rows = per_method[(per_method["series"] == "total_ate_per_s") & (per_method["n_jobs"] == n)].sort_values("budget")
            total.plot(rows["budget"], rows["value"], style, marker="o", color=colour, label=f"{label}, {n} job(s)")
        tats = per_method[(per_method["series"] == "job_tat_s") & (per_method["budget"] == shown)]
        offset = (order - 0.5) * 0.24
        completion.scatter([counts.index(n) + offset for n in tats["n_jobs"]], tats["value"] * 1e3, color=colour, s=14, label=label)
        for kind, marker in (("collision_share", "o"), ("ps_fallback_share", "x")):
            for style, n in zip(styles, counts):
                rows = per_method[(per_method["series"] == kind) & (per_method["n_jobs"] == n)].sort_values("budget")
                if len(rows):
                    shares.plot(rows["budget"], rows["value"] * 100, style, marker=marker, color=colour,
                                label=f"{'collided chunks' if kind == 'collision_share' else 'packets to the PS'}, {n} job(s)")
    total.set_xscale("log", base=2)
    total.set_xlabel("register budget (aggregators of k values)")
    total.set_ylabel("total ATE/s (all jobs' elements / makespan)")
    total.legend(fontsize=6, ncol=2)
    total.set_title("static partition: budget / (2 x jobs) slots per job; shared pool: all of it", fontsize=8, loc="left")
    completion.set_xticks(range(len(counts)), [str(n) for n in counts])
    completion.set_xlabel("jobs sharing the switch (staggered starts)")
    completion.set_ylabel("each job's completion time (TAT, ms)")
    completion.legend(fontsize=7)
    completion.set_title(f"budget {shown} aggregators", fontsize=8, loc="left")
    shares.set_xscale("log", base=2)
    shares.set_xlabel("register budget (aggregators of k values)")
    shares.set_ylabel("share (%)")
    if counted:
        shares.legend(fontsize=6)
    else:  # runs whose servers' counts were not recorded (emulated runs before they were)
        shares.text(0.5, 0.5, "these runs recorded no parameter-server counts", ha="center", va="center", transform=shares.transAxes)
        shares.set_xticks([])
    shares.set_title("shared pool's PS counters: collisions and PS fallback", fontsize=8, loc="left")
    fig.suptitle(f"Jobs sharing one switch with the same register budget ({summary['link_mbps']:g} Mbit/s links, {clock_stamp(numbers, summary)})"
                 + "".join("\n" + CLAIM.format(label=methods.by_name(method).label) for method in shared))
    return fig


def figure(run: Path) -> tuple[pd.DataFrame, Figure]:
    numbers = table(run)
    return numbers, draw(numbers, json.loads((run / fmt.SUMMARY_FILE).read_text()))


def redraw(numbers: pd.DataFrame, summary: dict) -> Figure:
    return draw(numbers.astype({"n_jobs": int, "budget": int}), summary)


FIGURE = RunFigure(NAME, newest_run, figure, redraw, ("link_mbps", "simulated", "switch_target"))
