"""What every figure must say about where its numbers come from.

Numbers from an emulation are only meaningful relative to the emulated link rate, and only
at all if the emulator kept up with it (a host CPU saturated by software switching or a
link that did not reach its configured rate measures the machine, not the protocol).
``emulation_context`` distils that from summary.json and fidelity.csv; ``annotate`` writes
it on a figure and stamps a figure whose run did not keep up.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import pandas as pd
from matplotlib.figure import Figure

from experiments.metrics import timed_cpu_samples
from analysis.load import Results, simulated_flags

CPU_BUSY_LIMIT = 0.95
"""A host this busy was probably the bottleneck (fidelity.csv cpu_busy_fraction)."""
LINK_RATE_TOLERANCE = 0.10
"""achieved/configured link rate above 1 + this means shaping did not hold.

Only the upper side is checked: the runner measures achieved_mbps during the job itself,
and a job that does not saturate its link (a small tensor, a stalled ring) legitimately
stays below the configured rate. Falling behind shows up as CPU saturation instead."""
NOT_KEPT_UP = "EMULATION DID NOT KEEP UP"
SUBTITLE_FONTSIZE = 7
CHAR_WIDTH_EM = 0.55
"""A generous average glyph width of the subtitle's font, in ems: the subtitle is wrapped to
the axes' width with it, since matplotlib's own ``wrap=True`` wraps at the figure's edge,
which a left-aligned axes title under constrained layout runs past."""
EMULATED, SIMULATED = "emulated", "simulated"


@dataclass(frozen=True)
class EmulationContext:
    """Link rates and switch targets of the data behind a figure, and fidelity problems."""

    link_mbps: tuple[float, ...]
    switch_targets: tuple[str, ...]
    problems: tuple[str, ...]
    link_delays: tuple[str, ...] = ()
    """'10 ms (switch_delay_line)' per distinct configured link delay, if any."""
    clocks: tuple[str, ...] = (EMULATED,)
    """Where the runs' numbers come from: ``emulated`` (Mininet, wall time), ``simulated``
    (run_experiment.py --simulate), or both when a figure holds runs of each."""

    @property
    def kept_up(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        """One line for the figure: emulated, at which link rate, on which switch target."""
        rates = " / ".join("unshaped" if math.isnan(rate) else f"{rate:g} Mbit/s" for rate in self.link_mbps)
        targets = ", ".join(self.switch_targets)
        delays = f" with {' / '.join(self.link_delays)} delay" if self.link_delays else ""
        if self.clocks == (EMULATED,):
            return f"Emulation: links shaped to {rates}{delays}, switch target {targets} (not the paper's hardware)"
        which = "Simulation" if self.clocks == (SIMULATED,) else "Emulation and simulation"
        return f"{which} (summary.json simulated): {rates} links{delays}, switch target {targets}"


def emulation_context(results: Results) -> EmulationContext:
    """The context of everything in ``results`` (usually one run)."""
    return EmulationContext(
        link_mbps=tuple(sorted(float(rate) for rate in results.runs["link_mbps"].unique())),
        switch_targets=tuple(sorted(str(target) for target in results.summary["switch_target"].unique())),
        problems=tuple(fidelity_problems(results.summary, results.fidelity, results.runs)),
        link_delays=link_delays(results.summary),
        clocks=clocks(results.summary),
    )


def clocks(summary: pd.DataFrame) -> tuple[str, ...]:
    """Which clocks the runs ran on (runs older than summary.json's ``simulated`` are emulated)."""
    return tuple(sorted({SIMULATED if flag else EMULATED for flag in simulated_flags(summary)}))


def link_delays(summary: pd.DataFrame) -> tuple[str, ...]:
    """Each configured per-link delay and how it was applied (runs without the fields: none)."""
    if "link_delay_ms" not in summary.columns:
        return ()
    delayed = summary[summary["link_delay_ms"].fillna(0) > 0]
    return tuple(sorted({f"{row.link_delay_ms:g} ms ({row.delay_mechanism})" for row in delayed.itertuples()}))


def fidelity_problems(summary: pd.DataFrame, fidelity: pd.DataFrame, runs: pd.DataFrame) -> list[str]:
    """Human-readable reasons to distrust the runs, empty if the emulation kept up.

    CPU shares count only for jobs long enough to measure them (``timed_cpu_samples``).
    """
    problems = [f"{run}: summary.json kept_up is false" for run in summary.loc[~summary["kept_up"].astype(bool), "run"]]
    cpu = timed_cpu_samples(fidelity, runs)
    busy = cpu[cpu["cpu_busy_fraction"] >= CPU_BUSY_LIMIT]
    for (run, host), rows in busy.groupby(["run", "host"], sort=True):
        problems.append(f"{run}: host {host} CPU busy {rows['cpu_busy_fraction'].max():.0%}")
    ratio = fidelity["achieved_mbps"] / fidelity["configured_mbps"]
    off = fidelity[ratio > 1 + LINK_RATE_TOLERANCE].assign(ratio=ratio)
    for (run, host), rows in off.groupby(["run", "host"], sort=True):
        worst = rows.loc[rows["ratio"].idxmax()]
        problems.append(
            f"{run}: host {host} link achieved {worst['achieved_mbps']:g} of {worst['configured_mbps']:g} Mbit/s"
        )
    return problems


def annotate(fig: Figure, context: EmulationContext, title: str, notes: tuple[str, ...] = ()) -> None:
    """Title the figure, state the emulation context (and ``notes``) under it, stamp it if not kept up."""
    fig.suptitle(title)
    lines = [context.describe(), *notes]
    if not context.kept_up:
        lines.extend(context.problems)
        fig.text(
            0.5, 0.5, NOT_KEPT_UP, color="red", alpha=0.35, fontsize=26, fontweight="bold",
            ha="center", va="center", rotation=20, zorder=10,
        )  # fmt: skip
    for ax in fig.axes[:1]:  # the top panel: stacked panels share it, and repeating it would crowd them
        width_pt = fig.get_figwidth() * ax.get_position().width * 72
        chars = max(40, int(width_pt / (SUBTITLE_FONTSIZE * CHAR_WIDTH_EM)))
        text = "\n".join(textwrap.fill(line, chars) for line in lines)
        ax.set_title(text, fontsize=SUBTITLE_FONTSIZE, loc="left", color="black" if context.kept_up else "red")
