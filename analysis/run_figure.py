"""The command line of a figure drawn from one run of its own kind (not from runs.csv
sweeps, which ``python -m analysis`` draws): find the newest such run, draw, save.

Used by ``python -m analysis.shared_switch`` and ``python -m analysis.hierarchical``. Files
are written as by ``analysis.catalog.save``: <name>.png, <name>.pdf and <name>.csv (the
numbers plotted).
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Callable

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

log = logging.getLogger("analysis")

Draw = Callable[[Path], tuple[pd.DataFrame, Figure]]
"""A run directory -> the figure's numbers and the figure."""


def newest_run(roots: list[Path], wanted: Callable[[dict, Path], bool], what: str) -> Path:
    """The run under ``roots`` started last (summary.json ``started_utc``) that ``wanted``
    (its summary, its folder) accepts; FileNotFoundError naming ``what`` if none."""
    runs = []
    for root in roots:
        for summary_path in Path(root).rglob("summary.json"):
            summary = json.loads(summary_path.read_text())
            if wanted(summary, summary_path.parent):
                runs.append((summary["started_utc"], summary_path.parent))
    if not runs:
        raise FileNotFoundError(f"no {what} under {', '.join(map(str, roots))}")
    return max(runs)[1]


def main(name: str, description: str, find: Callable[[list[Path]], Path], draw: Draw, argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m analysis.{name}", description=description)
    parser.add_argument("results", nargs="+", type=Path, help="run directories or parents of runs")
    parser.add_argument("--out", type=Path, default=Path("docs/figures"), help="output directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    matplotlib.use("Agg")
    run = find(args.results)
    table, fig = draw(run)
    args.out.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out / f"{name}.png", dpi=150)
    fig.savefig(args.out / f"{name}.pdf")
    table.to_csv(args.out / f"{name}.csv", index=False)
    log.info("wrote %s.{png,pdf,csv} in %s from %s", name, args.out, run)
    return 0
