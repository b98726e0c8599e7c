"""The labs' own figures, next to the paper's (analysis/catalog.py), drawn the same way.

``python -m labs plot N`` draws the figures lab.yaml names: a name from analysis's
catalogue is rendered by analysis from the student's runs; the two here are the labs'
own. ``lab4_pool_model`` is a run figure like the catalogue's (a FigureSpec); the
quantization error of lab 1 needs no run: it is computed with the student's
protocol/quantize.py on synthetic tensors.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from analysis.switchml import models as switchml_models
from analysis.catalog import FigureSpec, sweeping
from analysis.context import EmulationContext, annotate
from analysis.figures import LINE_RATE_LABEL, log_axis_at, new_axes
from analysis.load import Results
from analysis.tables import MissingData, pool_size_table
from methods import SWITCHML
from protocol import quantize
from protocol.params import mbps_to_bps

# ---- lab 1: quantization error ------------------------------------------------------

ELEMENTS = 4096
WORKERS = (2, 4, 8, 16, 32, 64)
KS = (1, 4, 32, 256, 1024)
BITS = (8, 12, 16, 20, 24, 28, 32)
BASE = {"n_workers": 8, "k": 32, "bits": 32}
"""Each panel varies one of these and holds the other two here."""


def _gradients(n_workers: int, seed: int) -> list[np.ndarray]:
    """Gradient-like float32 tensors: normal values whose scale spans four decades."""
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.uniform(-4, 0, size=ELEMENTS)
    return [(rng.standard_normal(ELEMENTS) * scale).astype(np.float32) for _ in range(n_workers)]


def quantization_error_table(seed: int = 1) -> pd.DataFrame:
    """Per (varied parameter, value): the all-reduce's largest error relative to the largest
    exact sum, measured and as the proven bound (``quantize.error_bound``)."""
    rows = []
    for varied, values in (("n_workers", WORKERS), ("k", KS), ("bits", BITS)):
        for value in values:
            point = {**BASE, varied: value}
            inputs = _gradients(point["n_workers"], seed)
            exact = np.sum(np.stack(inputs).astype(np.float64), axis=0)
            result = quantize.expected_sum(inputs, k=point["k"], n=point["n_workers"], bits=point["bits"])
            scale = np.abs(exact).max()
            bound = quantize.error_bound(result.scale, point["n_workers"], result.values)
            rows.append({
                "varied": varied, "value": value, **point,
                "max_error_relative": float(np.abs(result.values - exact).max() / scale),
                "bound_relative": float(bound.max() / scale),
            })  # fmt: skip
    return pd.DataFrame(rows)


def quantization_error_figure(table: pd.DataFrame) -> Figure:
    """Three panels: error against workers, against k, against adder bits (log y)."""
    fig = Figure(figsize=(11, 4), layout="constrained")
    labels = {"n_workers": "number of workers n", "k": "elements per packet k", "bits": "bits of the switch's adders"}
    for ax, (varied, rows) in zip(fig.subplots(1, 3), table.groupby("varied", sort=False)):
        ax.plot(rows["value"], rows["max_error_relative"], "o-", color=SWITCHML.colour, label="measured (max)")
        ax.plot(rows["value"], rows["bound_relative"], "k--", label="proven bound (max)")
        if varied == "bits":
            ax.set_xticks(list(rows["value"]))
        else:
            log_axis_at(ax, rows["value"], base=2)
        ax.set_yscale("log")
        ax.set_xlabel(labels[varied])
        held = ", ".join(f"{key}={BASE[key]}" for key in BASE if key != varied)
        ax.set_title(held, fontsize=8)
        ax.legend(fontsize=8)
    fig.axes[0].set_ylabel("|SwitchML sum − exact sum| ÷ max |exact sum|")
    fig.suptitle(f"Quantization error of a {ELEMENTS}-element float32 all-reduce (your protocol/quantize.py)")
    return fig


# ---- lab 4: the pool-size model against the run ----------------------------------------


def pool_model_table(results: Results) -> pd.DataFrame:
    """pool_size_table with the model's share of the line-rate bound for each pool size:
    ``switchml_pool_bound_ate`` at the idle round trip of the run's links."""
    table = pool_size_table(results)
    table = table[table["method"] == SWITCHML.name].copy()
    if table.empty:
        raise MissingData("no SwitchML job in the pool-size sweep")
    delays = results.summary["link_delay_ms"].dropna().unique() if "link_delay_ms" in results.summary else []
    if len(delays) != 1:
        raise MissingData(f"the pool model needs one link delay per run, found {list(delays)}")
    delay_s = float(delays[0]) / 1e3
    link_bps = mbps_to_bps(table["link_mbps"])
    table["round_trip_s"] = [switchml_models.slot_round_trip_s(bps, int(k), delay_s) for bps, k in zip(link_bps, table["k"])]
    table["model_ate_per_s"] = [
        switchml_models.switchml_pool_bound_ate(bps, int(k), int(pool), rtt)
        for bps, k, pool, rtt in zip(link_bps, table["k"], table["pool_size"], table["round_trip_s"])
    ]
    table["model_normalised"] = table["model_ate_per_s"] / table["line_rate_bound_ate_per_s"]
    return table.sort_values("pool_size").reset_index(drop=True)


def pool_model_figure(table: pd.DataFrame, context: EmulationContext) -> Figure:
    """Measured ATE/s ÷ line-rate bound against pool size, with the window model's share."""
    fig, ax = new_axes()
    median = table["normalised_median"]
    spread = np.vstack([median - table["normalised_min"], table["normalised_max"] - median])
    ax.errorbar(table["pool_size"], median, yerr=spread, marker="o", capsize=3, color=SWITCHML.colour,
                label="SwitchML (measured)")  # fmt: skip
    ax.plot(table["pool_size"], table["model_normalised"], "k:", marker="x", label="window model (your switchml_pool_bound_ate)")
    ax.axhline(1.0, color="k", linestyle="--", label=LINE_RATE_LABEL)
    log_axis_at(ax, table["pool_size"], base=2)
    ax.set_xlabel("pool size (slots)")
    ax.set_ylabel("ATE/s ÷ SwitchML line-rate bound")
    ax.set_ylim(0, 1.1)
    ax.legend(fontsize=8)
    rtt_ms = table["round_trip_s"].iloc[0] * 1e3
    annotate(fig, context, "Pool size: measured against the window model", notes=(f"idle slot round trip {rtt_ms:.1f} ms",))
    return fig


LAB4_POOL_MODEL = FigureSpec(
    "lab4_pool_model", sweeping("pool_size"), pool_model_table, pool_model_figure,
    "# Pool size against the window model (lab 4)\n\nThe measured share of the line-rate bound per pool size, and the model's.\n",
)  # fmt: skip
RUN_FIGURES = (LAB4_POOL_MODEL,)
"""Lab figures drawn from runs, rendered like the catalogue's."""
OFFLINE_FIGURES = {"lab1_quantization_error": (quantization_error_table, quantization_error_figure)}
"""Lab figures that need no run: name -> (table, draw)."""
