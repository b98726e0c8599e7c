"""Figures drawn from one run of their own kind rather than from runs.csv sweeps: the run
is found by what its summary.json says (``newest_run``), and the figure reads that run's
folder itself (the shared-switch run has no runs.csv at all).

``python -m analysis`` draws these (``analysis.catalog.RUN_FIGURES``) after the catalogue's
figures, and saves them as it saves those: <name>.png, <name>.pdf and <name>.csv (the
numbers plotted).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd
from matplotlib.figure import Figure

from analysis.tables import MissingData
from protocol import results_format as fmt

Draw = Callable[[Path], tuple[pd.DataFrame, Figure]]
"""A run directory -> the figure's numbers and the figure."""
Redraw = Callable[[pd.DataFrame, dict], Figure]
"""The figure's numbers (its saved CSV) and the summary.json keys it reads -> the figure."""


@dataclass(frozen=True)
class RunFigure:
    """A figure of one run: its file name, how its run is found under the result folders, how it is drawn."""

    name: str
    find: Callable[[list[Path], bool | None], Path]
    """The result folders, and the clock (simulated or not; None: either) -> the run to draw."""
    draw: Draw
    redraw: Redraw
    summary_keys: tuple[str, ...]
    """What ``redraw`` reads of the run's summary.json, saved beside the figure (analysis/redraw.py)."""


def newest_run(roots: list[Path], wanted: Callable[[dict, Path], bool], what: str, simulated: bool | None = None) -> Path:
    """The run under ``roots`` started last (summary.json ``started_utc``) that ``wanted``
    (its summary, its folder) accepts, on the simulated clock or not (``simulated``; None:
    either); MissingData naming ``what`` if none."""
    runs = []
    for root in roots:
        for summary_path in Path(root).rglob(fmt.SUMMARY_FILE):
            summary = json.loads(summary_path.read_text())
            if wanted(summary, summary_path.parent) and simulated in (None, fmt.is_simulated(summary)):
                runs.append((summary["started_utc"], summary_path.parent))
    if not runs:
        clock = "" if simulated is None else ("simulated " if simulated else "emulated ")
        raise MissingData(f"no {clock}{what} under {', '.join(map(str, roots))}")
    return max(runs)[1]
