"""Regenerate every figure whose data is present.

    python -m analysis RESULTS_DIR [RESULTS_DIR ...] [--out docs/figures] [--prefix paper_] [--clock emulated|simulated]

Each RESULTS_DIR may be one run or any parent of runs (results/, results/<config>/).
For each figure the PNG, PDF and the CSV of the numbers behind it are written to --out:
the catalogue's figures from the runs.csv sweeps, then the figures of one run of their own
kind (hierarchical, shared_switch) from the newest such run. Figures whose runs are
missing from the results are logged as skipped, not failed, so one command serves
whatever subset of the experiments has been run. ``--prefix`` goes in front of every file
name, so that the paper-scale simulated runs' figures (``make paper-sim``: paper_ate_vs_workers.png)
sit beside the emulated ones in docs/figures without replacing them; ``--clock`` draws the
catalogue's figures from the emulated or the simulated runs only (``make figures``: emulated),
so that a newer simulated run never replaces an emulated figure.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from base.cli import setup_logging, user_error
from analysis.catalog import FIGURES, RUN_FIGURES, FigureSpec, render, save_figure
from analysis.context import EMULATED, SIMULATED
from analysis.load import Results, ResultsFormatError, find_runs, load_results
from analysis.tables import MissingData

log = logging.getLogger("analysis")


def main(argv: list[str] | None = None) -> int:
    """Draw every figure it can; returns 0 if at least one figure was written, 1 if none
    was, 2 if the folders hold no complete run to draw from."""
    args = arguments(argv)
    # A shared-switch run has no runs.csv: results of only such runs have no catalogue figure.
    try:
        results = load_results(args.results) if any(find_runs(root) for root in args.results) else None
        if results is not None and args.clock is not None:
            results = results.on_clock(args.clock == SIMULATED)
    except (ResultsFormatError, FileNotFoundError) as problem:  # nothing to draw from: one line, not a traceback
        return user_error(log, problem)
    return _draw(args, results)


def _draw(args: argparse.Namespace, results: Results | None) -> int:
    """Every figure whose data ``results`` (or a run of its own kind) has."""
    drawers = [(spec.name, lambda spec=spec: _render_catalogued(spec, results, args.results)) for spec in FIGURES]
    drawers += [(figure.name, lambda figure=figure: figure.draw(figure.find(args.results))) for figure in RUN_FIGURES]
    written, skipped = [], []
    for name, draw in drawers:
        try:
            table, fig = draw()
        except MissingData as reason:
            log.warning("skipped %s: %s", name, reason)
            skipped.append(name)
            continue
        paths = save_figure(f"{args.prefix}{name}", table, fig, args.out)
        log.info("wrote %s", ", ".join(str(path) for path in paths))
        written.append(name)
    log.info("%d figure(s) written to %s, %d skipped%s", len(written), args.out, len(skipped),
             f" ({', '.join(skipped)})" if skipped else "")  # fmt: skip
    return 0 if written else 1


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The result folders and --out, parsed, with logging to stderr and matplotlib's
    file-only backend set up."""
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="+", type=Path, help="run directories or parents of runs")
    parser.add_argument("--out", type=Path, default=Path("docs/figures"), help="output directory")
    parser.add_argument("--prefix", default="", help="put in front of every figure's file name (e.g. paper_)")
    parser.add_argument("--clock", choices=(EMULATED, SIMULATED), help="draw the catalogue's figures from these runs only (default: all)")
    args = parser.parse_args(argv)
    setup_logging()
    matplotlib.use("Agg")
    return args


def _render_catalogued(spec: FigureSpec, results: Results | None, roots: list[Path]) -> tuple[pd.DataFrame, Figure]:
    if results is None:
        raise MissingData(f"no runs.csv under {', '.join(map(str, roots))}")
    return render(spec, results)


if __name__ == "__main__":
    sys.exit(main())
