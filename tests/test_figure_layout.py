"""The published figures, read as a reader reads them: redrawn from what docs/figures holds
(each figure's CSV and its <name>.json, analysis/redraw.py) and checked on the renderer's
own bounding boxes.

- every text lies inside the figure (a subtitle clipped at the edge is lost);
- no two tick labels of an axis overlap ("bert_basedeeplight");
- every legend entry's line or marker is inside its axes (a legend entry for a bound drawn
  off the axis promises a line nobody sees);
- every figure with error bars says in its legend what they span;
- a figure at the paper's 100 Gbit/s carries the paper's own numbers where it states them;
- a send timeline has enough bins over its job to show its shape.
"""

from __future__ import annotations

import json

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.text import Text

from analysis import paper
from analysis.redraw import redraw
from analysis.tables import MIN_TIMELINE_BINS
from protocol.params import REPO_ROOT

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

matplotlib.use("Agg")
FIGURES = REPO_ROOT / "docs" / "figures"
PUBLISHED = sorted(path.stem for path in FIGURES.glob("*.json"))


@pytest.fixture(scope="module", params=PUBLISHED)
def drawn(request) -> tuple[str, Figure]:
    name = request.param
    fig = redraw(FIGURES / f"{name}.csv", json.loads((FIGURES / f"{name}.json").read_text()))
    FigureCanvasAgg(fig).draw()
    return name, fig


def tick_labels(axis) -> list[Text]:
    """The tick labels an axis draws: those of ticks inside its view (matplotlib keeps a
    label for a tick just past either end, which it does not draw)."""
    low, high = sorted(axis.get_view_interval())
    return [tick.label1 for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()]
            if tick.label1.get_visible() and tick.label1.get_text() and low <= tick.get_loc() <= high]


def texts(fig: Figure) -> list[Text]:
    """Every text the figure draws: titles, labels, legends, annotations and tick labels."""
    ticks = {id(label) for ax in fig.axes for axis in (ax.xaxis, ax.yaxis)
             for tick in [*axis.get_major_ticks(), *axis.get_minor_ticks()] for label in (tick.label1, tick.label2)}
    drawn = [text for text in fig.findobj(Text) if id(text) not in ticks and text.get_visible() and text.get_text().strip()]
    return drawn + [label for ax in fig.axes for axis in (ax.xaxis, ax.yaxis) for label in tick_labels(axis)]


def test_every_figure_is_published_with_what_redraws_it() -> None:
    pngs = {path.stem for path in FIGURES.glob("*.png")}
    assert pngs == set(PUBLISHED), f"figures without a <name>.json: {sorted(pngs - set(PUBLISHED))}"


def test_every_text_lies_inside_the_figure(drawn) -> None:
    name, fig = drawn
    renderer = fig.canvas.get_renderer()
    outside = [text.get_text()[:60] for text in texts(fig) if not fig.bbox.padded(1).contains(*text.get_window_extent(renderer).p0)
               or not fig.bbox.padded(1).contains(*text.get_window_extent(renderer).p1)]
    assert not outside, f"{name}: text past the figure's edge: {outside}"


def overlapping_tick_labels(ax: Axes, renderer) -> list[tuple[str, str]]:
    clashes = []
    for axis in (ax.xaxis, ax.yaxis):
        labels = tick_labels(axis)
        boxes = [label.get_window_extent(renderer) for label in labels]
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                if boxes[i].overlaps(boxes[j]):
                    clashes.append((labels[i].get_text(), labels[j].get_text()))
    return clashes


def test_no_tick_labels_overlap(drawn) -> None:
    name, fig = drawn
    renderer = fig.canvas.get_renderer()
    clashes = [clash for ax in fig.axes for clash in overlapping_tick_labels(ax, renderer)]
    assert not clashes, f"{name}: overlapping tick labels {clashes}"


def legend_artists_outside(ax: Axes) -> list[str]:
    """Legend entries whose line or markers lie wholly outside the axes' view."""
    legend = ax.get_legend()
    if legend is None:
        return []
    (x0, x1), (y0, y1) = sorted(ax.get_xlim()), sorted(ax.get_ylim())
    labelled = {artist.get_label(): artist for artist in [*ax.lines, *ax.containers, *ax.collections, *ax.patches]}
    outside = []
    for text in legend.get_texts():
        artist = labelled.get(text.get_text())
        if isinstance(artist, ErrorbarContainer):
            artist = artist.lines[0]
        if not isinstance(artist, Line2D):
            continue  # bars and patches are drawn from 0 up: inside whenever the axes start at 0
        xs, ys = (np.asarray(values, dtype=float) for values in artist.get_data())
        if artist.get_transform() is ax.get_yaxis_transform():  # axhline: x spans the axes, y in data
            inside = (ys >= y0) & (ys <= y1)
        elif artist.get_transform() is ax.get_xaxis_transform():  # axvline: y spans the axes, x in data
            inside = (xs >= x0) & (xs <= x1)
        else:
            inside = (xs >= x0) & (xs <= x1) & (ys >= y0) & (ys <= y1)
        if not inside.any():
            outside.append(text.get_text())
    return outside


def test_no_legend_entry_for_a_line_outside_its_axes(drawn) -> None:
    name, fig = drawn
    outside = [label for ax in fig.axes for label in legend_artists_outside(ax)]
    assert not outside, f"{name}: legend entries for lines outside the axes: {outside}"


def test_error_bars_are_explained(drawn) -> None:
    name, fig = drawn
    for ax in fig.axes:
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer) or getattr(c, "errorbar", None) is not None]
        if not bars:
            continue
        title = ax.get_legend().get_title().get_text() if ax.get_legend() else ""
        assert "error bars" in title, f"{name}: error bars without a legend title saying what they span"


def test_a_figure_at_the_papers_rate_carries_the_papers_numbers() -> None:
    name = "paper_ate_vs_workers"
    fig = redraw(FIGURES / f"{name}.csv", json.loads((FIGURES / f"{name}.json").read_text()))
    ys = sorted(y for line in fig.axes[0].lines if line.get_label().startswith("paper:") for y in line.get_ydata())
    assert ys == sorted([*paper.NCCL_RING_ATE_PER_S.values(), *[paper.SWITCHML_ATE_PER_S] * len(paper.NCCL_RING_ATE_PER_S)])
    for other in ("ate_vs_workers", "paper_hierarchical_ate_vs_workers"):  # 10 Mbit/s; 64-256 workers, where the paper has none
        fig = redraw(FIGURES / f"{other}.csv", json.loads((FIGURES / f"{other}.json").read_text()))
        assert not [line for line in fig.axes[0].lines if line.get_label().startswith("paper:")], other


@pytest.mark.parametrize("name", [name for name in PUBLISHED if name.endswith("loss_timeline")])
def test_a_send_timeline_has_enough_bins_over_its_job(name: str) -> None:
    table = pd.read_csv(FIGURES / f"{name}.csv")
    bins = table.groupby("rank")["t_ms"].nunique().min()
    assert bins >= MIN_TIMELINE_BINS, f"{name}: {bins} bins over the job"


def test_the_layout_checks_see_the_defects() -> None:
    """Each check fails on the defect it is for (so a pass means something)."""
    fig = Figure(figsize=(3, 3))
    ax = fig.add_subplot()
    ax.set_xticks(range(3), ["bert_base_of_a_long_name", "deeplight_of_a_long_name", "x"])
    ax.set_xlim(-0.5, 2.5)
    ax.errorbar([0, 1], [1, 2], yerr=[0.1, 0.1], label="measured")
    ax.axhline(50, label="bound off the axis")
    ax.set_ylim(0, 3)
    ax.legend()
    ax.set_title("a subtitle much too long to fit in a figure this narrow " * 2, loc="left")
    FigureCanvasAgg(fig).draw()
    renderer = fig.canvas.get_renderer()
    assert overlapping_tick_labels(ax, renderer)
    assert legend_artists_outside(ax) == ["bound off the axis"]
    assert any(not fig.bbox.contains(*text.get_window_extent(renderer).p1) for text in texts(fig))
    assert isinstance(ax.containers[0], ErrorbarContainer) and "error bars" not in ax.get_legend().get_title().get_text()
