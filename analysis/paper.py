"""The paper's own numbers, where it states them as text, for drawing beside ours.

Sapio et al., NSDI'21, state these in the text of their evaluation; nothing here is read
off a plot. They were measured at 100 Gbit/s on Tofino
with 8 hosts, so they are drawn only on a figure whose links run at that rate (the
simulated clock's ``paper_*`` figures): beside a few Mbit/s of emulation they would compare
absolute rates that have nothing in common.
"""

from __future__ import annotations

from collections.abc import Iterable

from matplotlib.axes import Axes

from analysis.context import EmulationContext
import methods

LINK_MBPS = 100_000.0
"""The paper's link rate: 100 Gbit/s."""
STYLE = {"color": "grey", "linestyle": "none", "markersize": 8, "markeredgewidth": 1.5}

SWITCHML_ATE_PER_S = 2.8e9
"""SwitchML's ATE/s, "flat near line rate (~2.8e9 elem/s at 100 Gbps)", at 4, 8 and 16 workers."""
NCCL_RING_ATE_PER_S = {4: 1.38e9, 8: 1.25e9, 16: 0.97e9}
"""The NCCL ring's ATE/s at 4, 8 and 16 workers."""
TRAINING_SPEEDUP = "Paper (8 workers, 100 Gbit/s): up to 5.5x over NCCL-TCP and 2.27x over NCCL-RDMA"
"""The paper's headline training speedup; it gives no per-model number as text."""
HEADLINE_SPEEDUPS = {"NCCL-TCP": 5.5, "NCCL-RDMA": 2.27}
"""The headline's two numbers: SwitchML's largest training speedup over each NCCL transport
(its best model), at 100 Gbit/s with 8 workers."""


def draw_training_headline(ax: Axes, context: EmulationContext) -> None:
    """The paper's largest speedups as grey horizontal lines, on a 100 Gbit/s figure only."""
    if not at_paper_rate(context):
        return
    for (baseline, speedup), style in zip(HEADLINE_SPEEDUPS.items(), ("--", ":")):
        ax.axhline(speedup, color="grey", linestyle=style, linewidth=1.2, label=f"paper: up to {speedup:g}x over {baseline} (best model)")


def at_paper_rate(context: EmulationContext) -> bool:
    return context.link_mbps == (LINK_MBPS,)


def draw_ate_vs_workers(ax: Axes, context: EmulationContext, measured: Iterable[int]) -> None:
    """The paper's ATE/s at 4, 8 and 16 workers, as grey crosses, on a 100 Gbit/s figure,
    at those of its worker counts within the ``measured`` range (none on a figure of
    64-256 workers on a tree: the paper has no number there)."""
    measured = sorted(measured)
    workers = [n for n in sorted(NCCL_RING_ATE_PER_S) if measured and measured[0] <= n <= measured[-1]]
    if not at_paper_rate(context) or not workers:
        return
    ax.plot(workers, [SWITCHML_ATE_PER_S] * len(workers), marker="x", label=f"paper: {methods.SWITCHML.label} (~2.8e9, Tofino)", **STYLE)
    ax.plot(workers, [NCCL_RING_ATE_PER_S[n] for n in workers], marker="+", label="paper: NCCL ring", **STYLE)
