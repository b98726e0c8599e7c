"""One drawing function per paper figure: a table from ``analysis.tables`` in, a Figure out.

Figures are built with the object-oriented ``matplotlib.figure.Figure`` API (no pyplot
state), so they render with the Agg backend from the command line and inline in notebooks
alike. Measured series are medians over repetitions with min-max error bars, which each
legend says; analytic models are dashed/dotted lines without markers so the two can never be
confused; the paper's own numbers, where it states them, are grey crosses (analysis/paper.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from analysis.context import EmulationContext, annotate
from analysis import paper
from analysis.tables import TIMELINE_BIN_MS
import methods

METHOD_LABELS = {method.name: method.label for method in methods.REGISTRY}
METHOD_COLORS = {method.name: method.colour for method in methods.REGISTRY}
SUBJECT = methods.SWITCHML.label
"""The method under study (the registry's), which the figures compare the baselines with."""
LINE_RATE_LABEL = f"{SUBJECT} line-rate bound (model)"
SPEEDUP_SPREAD_NOTE = f"error bars: best baseline run with worst {SUBJECT} run, and the reverse"
RING_BOUND_LABEL = "ring = sharded-PS bound (model)"


def ate_vs_workers(table: pd.DataFrame, context: EmulationContext, normalised: bool = False) -> Figure:
    """ATE/s against the number of workers (paper: SwitchML flat near line rate, ring falling).

    ``normalised`` divides by the line-rate bound, the form in which an emulation at a few
    Mbit/s can be compared with the paper's 100 Gbit/s numbers.
    """
    fig, ax = new_axes()
    value, ring = ("normalised", "ring_bound_normalised") if normalised else ("ate_per_s", "ring_bound_ate_per_s")
    _plot_methods(ax, table, "n_workers", value)
    bounds = table.drop_duplicates("n_workers").sort_values("n_workers")
    line_rate = np.ones(len(bounds)) if normalised else bounds["line_rate_bound_ate_per_s"]
    ax.plot(bounds["n_workers"], line_rate, "k--", label=LINE_RATE_LABEL)
    ax.plot(bounds["n_workers"], bounds[ring], "k:", label=RING_BOUND_LABEL)
    if not normalised:
        paper.draw_ate_vs_workers(ax, context, bounds["n_workers"])
    log_axis_at(ax, bounds["n_workers"], base=2)
    ax.set_xlabel("number of workers")
    ax.set_ylabel(f"ATE/s ÷ {SUBJECT} line-rate bound" if normalised else "ATE/s (aggregated elements / s)")
    ax.set_ylim(bottom=0)
    legend(ax, table)
    title = "Aggregation throughput vs workers" + (" (normalised to line rate)" if normalised else "")
    annotate(fig, context, title)
    return fig


def tat_vs_size(table: pd.DataFrame, context: EmulationContext) -> Figure:
    """Tensor aggregation time against tensor size, log-log, with the TAT each bound allows."""
    fig, ax = new_axes()
    _plot_methods(ax, table, "elements", "tat_s")
    bounds = table.drop_duplicates("elements").sort_values("elements")
    ax.plot(bounds["elements"], bounds["line_rate_bound_tat_s"], "k--", label=LINE_RATE_LABEL)
    ax.plot(bounds["elements"], bounds["ring_bound_tat_s"], "k:", label=RING_BOUND_LABEL)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("tensor size (elements)")
    ax.set_ylabel("TAT (s)")
    legend(ax, table)
    annotate(fig, context, f"Aggregation time vs tensor size ({_workers(table)})")
    return fig


def tat_inflation_vs_loss(table: pd.DataFrame, context: EmulationContext) -> Figure:
    """TAT(loss)/TAT(0) against per-link loss rate (loss 0 is the reference line at 1)."""
    fig, ax = new_axes()
    lossy = table[table["loss"] > 0].assign(loss_percent=lambda t: t["loss"] * 100)
    _plot_methods(ax, lossy, "loss_percent", "inflation")
    ax.axhline(1.0, color="grey", linewidth=0.8, label="no inflation (TAT at loss 0)")
    log_axis_at(ax, lossy["loss_percent"], base=10)
    ax.set_xlabel("loss rate per link (%)")
    ax.set_ylabel("TAT(loss) / TAT(0)")
    legend(ax, lossy)
    mechanisms = ", ".join(sorted(set(lossy["loss_mechanism"])))
    annotate(fig, context, f"TAT inflation under loss ({mechanisms}, {_workers(table)})")
    return fig


def loss_timeline(table: pd.DataFrame, context: EmulationContext) -> Figure:
    """Packets each worker sent per bin (10 ms, finer for a short job) during one SwitchML job under loss.

    Flat stretches at the line-rate level are self-clocked sending; dips are workers waiting
    for a retransmission timeout on a lost update or result.
    """
    fig, ax = new_axes()
    for rank, rows in table.groupby("rank", sort=True):
        ax.step(rows["t_ms"], rows["packets_sent"], where="post", label=f"worker {rank}", linewidth=1)
    ax.axhline(table["line_rate_packets_per_bin"].iloc[0], color="k", linestyle="--", label=LINE_RATE_LABEL)
    ax.set_xlabel("time since job start (ms)")
    bin_ms = table["bin_ms"].iloc[0] if "bin_ms" in table else TIMELINE_BIN_MS  # a table from before the column: 10 ms
    ax.set_ylabel(f"packets sent per {bin_ms:g} ms")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, ncol=2)
    annotate(fig, context, f"{SUBJECT} send timeline at {table['loss'].iloc[0]:.2%} loss per link")
    return fig


def pool_size_sensitivity(table: pd.DataFrame, context: EmulationContext) -> Figure:
    """ATE/s against pool size: too few slots cannot cover the round trip, more adds nothing."""
    fig, ax = new_axes()
    _plot_methods(ax, table, "pool_size", "ate_per_s")
    bounds = table.drop_duplicates("pool_size").sort_values("pool_size")
    ax.plot(bounds["pool_size"], bounds["line_rate_bound_ate_per_s"], "k--", label=LINE_RATE_LABEL)
    log_axis_at(ax, bounds["pool_size"], base=2)
    ax.set_xlabel("pool size (slots)")
    ax.set_ylabel("ATE/s (aggregated elements / s)")
    ax.set_ylim(bottom=0)
    legend(ax, table)
    annotate(fig, context, f"Pool size sensitivity ({_workers(table)})")
    return fig


def training_speedup(table: pd.DataFrame, context: EmulationContext) -> Figure:
    """Per model: training speedup of SwitchML over each baseline, with the 2(n-1)/n expectation."""
    fig, ax = new_axes()
    for _, baseline, rows, x, width in _bars_per_baseline(ax, table):
        ax.bar(
            x, rows["speedup_median"], width, color=METHOD_COLORS[baseline],
            yerr=_spread(rows, "speedup"), capsize=3, label=f"over {METHOD_LABELS[baseline]} (measured)",
        )  # fmt: skip
        expected = rows["expected_speedup"].notna()
        if expected.any():
            ax.plot(x[expected], rows.loc[expected, "expected_speedup"], "kD", label="over ring, 2(n-1)/n model")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("model (gradient trace)")
    ax.set_ylabel(f"training speedup of {SUBJECT}")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8, title=SPEEDUP_SPREAD_NOTE, title_fontsize=7)
    first = table.iloc[0]
    dilation = (
        f"Time dilation: compute ×{first['dilation']:g} (workload.time_dilation); "
        f"links ×{first['link_slowdown']:g} slower than {first['reference_link_gbps']:g} Gbit/s"
    )
    scale = (
        f"Size scale: gradients and compute ×{first['size_scale']:g} (workload.size_scale), "
        "speedup preserved (comm linear in size)"
    )
    annotate(fig, context, f"Training speedup ({_workers(table)})", notes=(dilation, scale, paper.TRAINING_SPEEDUP))
    return fig


def training_step_speedup(table: pd.DataFrame, context: EmulationContext) -> Figure:
    """Per model: SwitchML's training speedup over each baseline with each layer's all-reduce
    overlapping compute (bars), and without overlap (black ticks), beside the paper's headline."""
    fig, ax = new_axes()
    for offset, baseline, rows, x, width in _bars_per_baseline(ax, table):
        modelled = rows["baseline_source"].str.startswith("model").all()
        ax.bar(x, rows["speedup"], width, color=METHOD_COLORS[baseline],
               label=f"over {METHOD_LABELS[baseline]}{' (its line-rate model)' if modelled else ''}, layers overlapping compute")
        ax.plot(x, rows["serial_speedup"], "k_", markersize=12, markeredgewidth=2,
                label="without overlap" if offset == 0 else None)
        nccl = rows["speedup_over_paper_nccl_ring"].notna()
        if nccl.any():
            ax.plot(x[nccl], rows.loc[nccl, "speedup_over_paper_nccl_ring"], "x", color="black", markersize=8,
                    label=f"over a ring at the paper's NCCL ATE/s ({paper.NCCL_RING_ATE_PER_S[int(rows['n_workers'].iloc[0])]:.3g} "
                          f"at {int(rows['n_workers'].iloc[0])} workers), with overlap")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    paper.draw_training_headline(ax, context)
    ax.set_xlabel("model (every layer's gradients one all-reduce)")
    ax.set_ylabel(f"training speedup of {SUBJECT} (iteration time ratio)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    first = table.iloc[0]
    notes = ["Compute: each layer's share measured on a CPU (workloads/layers.py) x the trace's per-iteration GPU time"
             + (f", x{first['time_dilation']:g} (time dilation) x{first['size_scale']:g} (size scale)"
                if (first["time_dilation"], first["size_scale"]) != (1.0, 1.0) else ""),
             "Schedule: the reference's dnn_benchmark (all-reduce after each layer's backward pass, waited for by its next forward pass)"]
    if table["baseline_source"].str.startswith("model").any():
        notes.append(f"Baselines: {first['baseline_source']}, not NCCL")
    rate = f"{first['link_mbps'] / 1000:g} Gbit/s" if first["link_mbps"] >= 1000 else f"{first['link_mbps']:g} Mbit/s"
    annotate(fig, context, f"Training speedup per model ({_workers(table)}, {rate})", notes=tuple(notes))
    return fig


def _bars_per_baseline(ax: Axes, table: pd.DataFrame) -> Iterator[tuple[int, str, pd.DataFrame, pd.Series, float]]:
    """Per baseline: (its index, name, rows, bar centres, bar width) of a speedup figure with one
    group of bars per model, the models ticked upright (labels of any length never overlap)."""
    workloads = list(dict.fromkeys(table["workload"]))
    baselines = _method_order(table["baseline"])
    width = 0.8 / len(baselines)
    positions = {workload: index for index, workload in enumerate(workloads)}
    ax.set_xticks(range(len(workloads)), workloads, rotation=90)
    for offset, baseline in enumerate(baselines):
        rows = table[table["baseline"] == baseline]
        yield offset, baseline, rows, rows["workload"].map(positions) + (offset - (len(baselines) - 1) / 2) * width, width


def new_axes() -> tuple[Figure, Axes]:
    fig = Figure(figsize=(6.4, 4.6), layout="constrained")
    return fig, fig.add_subplot()


def _plot_methods(ax: Axes, table: pd.DataFrame, x: str, value: str) -> None:
    """One median line with min-max error bars per method, in a fixed method order."""
    for method in _method_order(table["method"]):
        rows = table[table["method"] == method].sort_values(x)
        ax.errorbar(
            rows[x], rows[f"{value}_median"], yerr=_spread(rows, value), marker="o", capsize=3,
            color=METHOD_COLORS[method], label=METHOD_LABELS[method],
        )  # fmt: skip


def legend(ax: Axes, table: pd.DataFrame) -> None:
    """The axes' legend, titled with what its error bars span."""
    ax.legend(fontsize=8, title=spread_note(table), title_fontsize=7)


def spread_note(table: pd.DataFrame) -> str:
    """What the error bars of a median-over-repetitions figure span, with the repetitions' count."""
    counts = sorted(set(int(n) for n in table["repetitions"])) if "repetitions" in table else []
    if not counts:
        return "median; error bars: min to max of the repetitions"
    if counts == [1]:
        return "one repetition per point: no error bars"
    reps = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    return f"median of {reps} repetitions; error bars: min to max"


def _method_order(present: pd.Series) -> list[str]:
    """The methods present, in the registry's order (methods/__init__.py)."""
    return sorted(set(present), key=methods.NAMES.index)


def _spread(rows: pd.DataFrame, value: str) -> np.ndarray:
    """Asymmetric error bars (median - min, max - median)."""
    median = rows[f"{value}_median"].to_numpy()
    return np.vstack([median - rows[f"{value}_min"].to_numpy(), rows[f"{value}_max"].to_numpy() - median])


def log_axis_at(ax: Axes, values: pd.Series, base: int) -> None:
    """Logarithmic x axis ticked exactly at the measured values, labelled plainly."""
    ax.set_xscale("log", base=base)
    ticks = sorted(set(values))
    ax.set_xticks(ticks, [f"{tick:g}" for tick in ticks])
    ax.minorticks_off()


def _workers(table: pd.DataFrame) -> str:
    counts = sorted(set(int(n) for n in table["n_workers"]))
    return f"{'/'.join(map(str, counts))} workers"


EXACT_STYLE = {"color": "black", "linestyle": "--", "linewidth": 1.2}
ABLATION_COLORS = ("tab:red", "tab:purple", "tab:brown", "tab:pink")


def training_convergence(table: pd.DataFrame, context: EmulationContext) -> Figure:
    """The numpy MLP's training: learning curves of the network's methods, exact and the ablations."""
    offline = f"exact (float64 sums), fewer-bit {SUBJECT}: replayed offline (quantization is arithmetic, not network)"
    return learning_curves(table, context, f"Data-parallel training through the emulated network ({_workers(table)})", offline)


def training_torch(table: pd.DataFrame, context: EmulationContext) -> Figure:
    """The DDP training: learning curves of the SwitchML hook and Gloo next to the exact replay."""
    offline = "exact: one process, float64 average of every rank's gradient, replayed offline"
    return learning_curves(table, context, f"PyTorch DDP through the emulated network ({_workers(table)})", offline)


def learning_curves(table: pd.DataFrame, context: EmulationContext, title: str, offline: str) -> Figure:
    """Test accuracy against step and against emulated time, and each series' distance to the
    exact reference's parameters: accuracy curves can coincide while parameters drift apart,
    which is what the bottom panel shows."""
    fig = Figure(figsize=(7.5, 13), layout="constrained")
    by_step, by_time, drift = fig.subplots(3, 1)
    styles = _training_styles(table)
    order = sorted(dict.fromkeys(table["series"]), key=lambda series: series == "exact")  # exact last: dashed, on top
    for series in order:
        rows = table[table["series"] == series]
        rows = rows.sort_values("step")
        style = styles[series]
        by_step.plot(rows["step"], rows["test_accuracy"] * 100, label=series, **style)
        if (rows["source"] == "network").all():
            by_time.plot(rows["emulated_time_s"], rows["test_accuracy"] * 100, label=series, **style)
        if series != "exact":
            moved = rows[rows["step"] > 0]
            drift.plot(moved["step"], moved["max_param_diff"], label=series, **style)
    by_step.set_xlabel("SGD step")
    by_time.set_xlabel("emulated time (s): slowest worker's compute + all-reduce, summed over steps")
    for ax in (by_step, by_time):
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(bottom=max(0.0, table["test_accuracy"].min() * 100 - 5), top=100)
        ax.legend(fontsize=8)
    drift.set_yscale("log")
    drift.set_xlabel("SGD step")
    drift.set_ylabel("max |parameters − exact reference's|")
    drift.legend(fontsize=8)
    annotate(fig, context, title, notes=(offline,))
    return fig


def _training_styles(table: pd.DataFrame) -> dict[str, dict[str, object]]:
    """Network methods in their usual colours, the exact reference dashed black, ablations dotted."""
    styles: dict[str, dict[str, object]] = {}
    ablations = iter(ABLATION_COLORS)
    for series, rows in table.groupby("series", sort=False):
        first = rows.iloc[0]
        if series == "exact":
            styles[series] = EXACT_STYLE
        elif first["source"] == "network":
            styles[series] = {"color": METHOD_COLORS[first["method"]], "linewidth": 1.2}
        else:
            styles[series] = {"color": next(ablations), "linestyle": ":", "linewidth": 1.5}
    return styles
