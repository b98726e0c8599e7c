"""The command line of a figure drawn from one run of its own kind (not from runs.csv
sweeps, which ``python -m analysis`` draws): find the newest such run, draw, save.

Used by ``python -m analysis.shared_switch`` and ``python -m analysis.hierarchical``. Files
are written as by ``analysis.catalog.save``: <name>.png, <name>.pdf and <name>.csv (the
numbers plotted).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Callable

import pandas as pd
from matplotlib.figure import Figure

from analysis.catalog import figure_command_args
from protocol import results_format as fmt

log = logging.getLogger("analysis")

Draw = Callable[[Path], tuple[pd.DataFrame, Figure]]
"""A run directory -> the figure's numbers and the figure."""


def newest_run(roots: list[Path], wanted: Callable[[dict, Path], bool], what: str) -> Path:
    """The run under ``roots`` started last (summary.json ``started_utc``) that ``wanted``
    (its summary, its folder) accepts; FileNotFoundError naming ``what`` if none."""
    runs = []
    for root in roots:
        for summary_path in Path(root).rglob(fmt.SUMMARY_FILE):
            summary = json.loads(summary_path.read_text())
            if wanted(summary, summary_path.parent):
                runs.append((summary["started_utc"], summary_path.parent))
    if not runs:
        raise FileNotFoundError(f"no {what} under {', '.join(map(str, roots))}")
    return max(runs)[1]


def main(name: str, description: str, find: Callable[[list[Path]], Path], draw: Draw, argv: list[str] | None = None) -> int:
    args = figure_command_args(f"python -m analysis.{name}", description, argv)
    run = find(args.results)
    table, fig = draw(run)
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / f"{name}.png", dpi=150)
    fig.savefig(args.out / f"{name}.pdf")
    table.to_csv(args.out / f"{name}.csv", index=False)
    log.info("wrote %s.{png,pdf,csv} in %s from %s", name, args.out, run)
    return 0
