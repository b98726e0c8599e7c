"""Figure ``hierarchical``: aggregation at the spine vs hierarchical, on the same tree.

``python -m analysis RESULTS...`` draws it from the newest run of a config whose points
differ in ``topology.aggregation`` (the summary's ``network`` records it per point), in the
leaf-spine links' rate and in their loss, such as configs/hierarchical.yaml. Three panels, one bar per mode:
- ATE/s without loss (median over repetitions, min-max bars) per leaf-spine rate, and the
  line-rate bound of the host links;
- the spine's load: bytes through its ports (frames its pipeline took in, its ingress events
  but the notes its protocol's record names, plus frames it sent, EGV_SENT, at the record's
  ``frame_bytes(k)`` each) per aggregated element;
- TAT with loss on the leaf-spine links ÷ TAT without, per mode and rate.
It writes hierarchical.png, .pdf and .csv (the numbers plotted). The jobs are the method under
study's (the registry's ``methods.SWITCHML``: the protocol that aggregates hierarchically),
its bound and frames its record's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import yaml
from matplotlib.figure import Figure

from analysis.run_figure import RunFigure
from analysis.run_figure import newest_run as newest_run_of
import methods
from protocol import params
from protocol import results_format as fmt
from network.port_counters import INGRESS_EVENT_PREFIX
from topologies.model import loss_probability

NAME = "hierarchical"
MODES = ("spine", "hierarchical")
COLORS = {"spine": "tab:orange", "hierarchical": "tab:blue"}
SUBJECT = methods.SWITCHML


def newest_run(roots: list[Path], simulated: bool | None = None) -> Path:
    """The run started last whose points compare aggregation modes."""
    def compares_modes(summary: dict, run: Path) -> bool:
        modes = {point.get("aggregation") for point in summary.get("network", {}).values()}
        return set(MODES) <= modes and (run / fmt.RUNS.file).is_file()

    return newest_run_of(roots, compares_modes, "run comparing aggregation modes (spine and hierarchical)", simulated)


def point_settings(run: Path) -> pd.DataFrame:
    """Per point: its aggregation mode (network.json), the leaf-spine links' rate and loss (its topology)."""
    summary = json.loads((run / fmt.SUMMARY_FILE).read_text())
    config = yaml.safe_load((run / fmt.CONFIG_FILE).read_text())
    values = config["sweep"]["values"] if config.get("sweep", {}).get("param") == "topology" else [config["topology"]]
    rows = []
    for index, network in summary["network"].items():
        topology = values[int(index)] if len(values) > 1 else config["topology"]
        uplink = topology.get("uplink", topology.get("link", {}))
        rows.append({"point": int(index), "aggregation": network["aggregation"], "uplink_mbps": uplink.get("bw_mbps"),
                     "uplink_loss": loss_probability(uplink.get("loss", 0.0))})
    return pd.DataFrame(rows)


def hierarchical_table(run: Path) -> pd.DataFrame:
    """Per (uplink rate, mode, uplink loss): ATE/s and TAT (median, min, max), spine bytes per element, TAT inflation."""
    runs = pd.read_csv(run / fmt.RUNS.file)
    runs = runs[runs["method"] == SUBJECT.name]
    jobs = runs.groupby(["point", "repetition"], as_index=False).agg(
        tat_s=("tat_s", "max"), elements=("elements", "first"), k=("k", "first"), link_mbps=("link_mbps", "first"))
    jobs["ate_per_s"] = jobs["elements"] / jobs["tat_s"]
    counters = pd.read_csv(run / fmt.SWITCH_COUNTERS.file)
    spine = counters[(counters["method"] == SUBJECT.name) & (counters["switch"] == "s1")]
    ingress = spine["counter"].str.startswith(INGRESS_EVENT_PREFIX) & ~spine["counter"].isin(SUBJECT.aggregation.event_notes)
    frames_in = spine[ingress].groupby(["point", "repetition"])["value"].sum()
    frames_out = spine[spine["counter"] == "EGV_SENT"].groupby(["point", "repetition"])["value"].sum()
    spine_frames = (frames_in + frames_out).rename("spine_frames").reset_index()
    jobs = jobs.merge(spine_frames, on=["point", "repetition"])
    jobs["spine_bytes_per_element"] = jobs["spine_frames"] * jobs["k"].map(SUBJECT.aggregation.frame_bytes) / jobs["elements"]
    table = jobs.groupby("point", as_index=False).agg(
        ate_per_s_median=("ate_per_s", "median"), ate_per_s_min=("ate_per_s", "min"), ate_per_s_max=("ate_per_s", "max"),
        tat_s_median=("tat_s", "median"), tat_s_min=("tat_s", "min"), tat_s_max=("tat_s", "max"),
        spine_bytes_per_element=("spine_bytes_per_element", "median"), k=("k", "first"), link_mbps=("link_mbps", "first"),
    ).merge(point_settings(run), on="point")
    clean = table[table["uplink_loss"] == 0].set_index(["uplink_mbps", "aggregation"])["tat_s_median"]
    table["tat_inflation"] = [tat / clean[(rate, mode)] for tat, rate, mode in zip(table["tat_s_median"], table["uplink_mbps"], table["aggregation"])]
    workers = runs.groupby("point")["n_workers"].first()
    table["line_rate_bound_ate_per_s"] = [SUBJECT.bound(params.mbps_to_bps(rate), int(workers[point]), k)
                                          for rate, k, point in zip(table["link_mbps"], table["k"], table["point"])]
    return table.sort_values(["uplink_mbps", "uplink_loss", "aggregation"], ascending=[False, True, True]).reset_index(drop=True)


def _grouped_bars(ax, rows: pd.DataFrame, value: str, groups: list, spread: bool = False) -> None:
    """One bar per mode in each group of ``groups`` (leaf-spine rates), medians with min-max bars."""
    width = 0.38
    for i, mode in enumerate(MODES):
        mine = rows[rows["aggregation"] == mode].set_index("uplink_mbps").reindex(groups)
        x = [g + (i - 0.5) * width for g in range(len(groups))]
        err = [mine[f"{value}_median"] - mine[f"{value}_min"], mine[f"{value}_max"] - mine[f"{value}_median"]] if spread else None
        ax.bar(x, mine[f"{value}_median"] if spread else mine[value], width, yerr=err, capsize=3, color=COLORS[mode], label=mode)
    ax.set_xticks(range(len(groups)), [f"{g:g} Mbit/s" for g in groups])
    ax.set_xlabel("leaf-spine links")
    ax.set_ylim(bottom=0)


def draw(table: pd.DataFrame, summary: dict) -> Figure:
    fig = Figure(figsize=(12, 4.4), layout="constrained")
    ate, load, inflation = fig.subplots(1, 3)
    clean = table[table["uplink_loss"] == 0]
    lossy = table[table["uplink_loss"] > 0]
    rates = sorted(clean["uplink_mbps"].unique(), reverse=True)
    _grouped_bars(ate, clean, "ate_per_s", rates, spread=True)
    bound = clean["line_rate_bound_ate_per_s"].iloc[0]
    ate.axhline(bound, color="k", linestyle="--", linewidth=1, label="host links' line-rate bound (model)")
    ate.set_ylim(0, 1.6 * max(bound, clean["ate_per_s_max"].max()))  # the bound inside the axes, the legend above the bars
    ate.set_ylabel("ATE/s (aggregated elements / s)")
    ate.set_title("throughput, no loss", fontsize=9)
    ate.legend(fontsize=7, loc="upper center", title="median; error bars: min to max\nover the repetitions", title_fontsize=6)
    _grouped_bars(load, clean, "spine_bytes_per_element", rates)
    load.set_ylabel("bytes through the spine's ports per element")
    load.set_title("spine load (its uplinks), no loss", fontsize=9)
    lossy_rates = sorted(lossy["uplink_mbps"].unique(), reverse=True)
    _grouped_bars(inflation, lossy, "tat_inflation", lossy_rates)
    inflation.axhline(1.0, color="k", linewidth=0.8)
    inflation.set_ylabel("TAT with loss ÷ TAT without")
    losses = sorted(lossy["uplink_loss"].unique())
    inflation.set_title(f"{', '.join(f'{loss:.0%}' for loss in losses)} loss on leaf-spine links", fontsize=9)
    title = (f"Aggregation at the spine vs hierarchical ({summary['workers']} workers on 2 leaves, "
             f"{summary['switch_target']} switches, {summary['link_mbps']:g} Mbit/s host links)")
    if not summary.get("kept_up", True):
        title += "\nnot kept up: the machine was saturated in some jobs (summary.json: saturated_jobs, saturated_processes)"
    fig.suptitle(title, color="black" if summary.get("kept_up", True) else "darkred")
    return fig


def figure(run: Path) -> tuple[pd.DataFrame, Figure]:
    table = hierarchical_table(run)
    return table, draw(table, json.loads((run / fmt.SUMMARY_FILE).read_text()))


FIGURE = RunFigure(NAME, newest_run, figure, draw, ("workers", "switch_target", "link_mbps", "kept_up"))
