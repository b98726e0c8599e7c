"""Regenerate every figure whose data is present.

    python -m analysis RESULTS_DIR [RESULTS_DIR ...] --out DIR [--prefix paper_] [--clock emulated|simulated]
                       [--mixed-clocks] [--mixed-commits]

Each RESULTS_DIR may be one run or any parent of runs (results/, results/<config>/).
For each figure the PNG, PDF and the CSV of the numbers behind it are written to --out,
which must be given (the reference figures in docs/figures are replaced only when asked
for by name): the catalogue's figures from the runs.csv sweeps, then the figures of one run
of their own kind (hierarchical, shared_switch), each from the newest run it can use.
Figures whose runs are missing from the results are logged as skipped, not failed, so one
command serves whatever subset of the experiments has been run.

Before drawing, it prints each figure's run and its provenance (commit, version, clock,
target, link rate, kernel, tools, command line: analysis/provenance.py), and refuses, in
one line, a set of figures whose runs come from different commits (--mixed-commits allows
it) or from both clocks (--clock draws one clock's runs only; --mixed-clocks allows both).
``--prefix`` goes in front of every file name, so that the paper-scale simulated runs'
figures (``make paper-sim``: paper_ate_vs_workers.png) sit beside the emulated ones.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from functools import partial
from pathlib import Path
from typing import Callable

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from base.cli import setup_logging, user_error
from analysis.catalog import FIGURES, RUN_FIGURES, FigureSpec, render_run, save_figure, select_run
from analysis.context import EMULATED, SIMULATED
from analysis.load import Results, ResultsFormatError, find_runs, load_results
from analysis.provenance import Drawn, mixing
from analysis.redraw import catalogued, of_run
from analysis.run_figure import RunFigure
from protocol import results_format as fmt
from analysis.tables import MissingData
from switchml_testbed.release import add_version_option, program

log = logging.getLogger("analysis")


def main(argv: list[str] | None = None) -> int:
    """Draw every figure it can; returns 0 if at least one figure was written, 1 if none
    was, 2 if the folders hold no complete run to draw from or its runs must not be mixed."""
    args = arguments(argv)
    simulated = None if args.clock is None else args.clock == SIMULATED
    # A shared-switch run has no runs.csv: results of only such runs have no catalogue figure.
    try:
        results = load_results(args.results) if any(find_runs(root) for root in args.results) else None
        if results is not None and simulated is not None:
            results = results.on_clock(simulated)
    except (ResultsFormatError, FileNotFoundError) as problem:  # nothing to draw from: one line, not a traceback
        return user_error(log, problem)
    planned, skipped = _plan(args, results, simulated)
    drawn = [Drawn.read(name, run) for name, _, runs in planned for run in runs]
    for run in drawn:
        log.info("provenance of %s", run.line())
    problem = mixing(drawn, args.mixed_commits, args.mixed_clocks)
    if problem is not None:
        return user_error(log, problem)
    return _draw(args, planned, skipped)


Plan = tuple[str, Callable[[], tuple[pd.DataFrame, Figure, dict]], list[Path]]
"""A figure to draw: its name, what draws it (the table, the figure and what ``save_figure``
keeps beside it for a redraw), and the run folders it is drawn from."""


def _plan(args: argparse.Namespace, results: Results | None, simulated: bool | None) -> tuple[list[Plan], list[str]]:
    """Each figure whose run is present, with that run; the names of those without one."""
    planned: list[Plan] = []
    skipped: list[str] = []
    for spec in FIGURES:
        try:
            if results is None:
                raise MissingData(f"no runs.csv under {', '.join(map(str, args.results))}")
            run = select_run(results, spec.source)
        except MissingData as reason:
            log.warning("skipped %s: %s", spec.name, reason)
            skipped.append(spec.name)
            continue
        planned.append((spec.name, partial(_render_catalogued, spec, run), [Path(path) for path in run.summary["path"]]))
    for figure in RUN_FIGURES:
        try:
            folder = figure.find(args.results, simulated)
        except MissingData as reason:
            log.warning("skipped %s: %s", figure.name, reason)
            skipped.append(figure.name)
            continue
        planned.append((figure.name, partial(_render_run_figure, figure, folder), [folder]))
    return planned, skipped


def _draw(args: argparse.Namespace, planned: list[Plan], skipped: list[str]) -> int:
    """Draw and save the planned figures."""
    written = []
    for name, draw, _ in planned:
        try:
            table, fig, drawn_by = draw()
        except MissingData as reason:
            log.warning("skipped %s: %s", name, reason)
            skipped.append(name)
            continue
        paths = save_figure(f"{args.prefix}{name}", table, fig, args.out, drawn_by)
        log.info("wrote %s", ", ".join(str(path) for path in paths))
        written.append(name)
    log.info("%d figure(s) written to %s, %d skipped%s", len(written), args.out, len(skipped),
             f" ({', '.join(skipped)})" if skipped else "")  # fmt: skip
    return 0 if written else 1


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The result folders and the options, parsed, with logging to stderr and matplotlib's
    file-only backend set up."""
    parser = argparse.ArgumentParser(prog=program("python -m analysis"), description=__doc__.splitlines()[0])
    add_version_option(parser)
    parser.add_argument("results", nargs="+", type=Path, help="run directories or parents of runs")
    parser.add_argument("--out", type=Path, required=True,
                        help="folder for the figures (PNG, PDF, CSV), e.g. figures/; docs/figures holds the reference figures")
    parser.add_argument("--prefix", default="", help="put in front of every figure's file name (e.g. paper_)")
    parser.add_argument("--clock", choices=(EMULATED, SIMULATED), help="draw the figures from these runs only")
    parser.add_argument("--mixed-clocks", action="store_true", help="allow emulated and simulated runs in one set of figures")
    parser.add_argument("--mixed-commits", action="store_true", help="allow runs of different commits in one set of figures")
    args = parser.parse_args(argv)
    setup_logging()
    matplotlib.use("Agg")
    return args


def _render_catalogued(spec: FigureSpec, run: Results) -> tuple[pd.DataFrame, Figure, dict]:
    table, fig, context = render_run(spec, run)
    return table, fig, catalogued(spec.name, context)


def _render_run_figure(figure: RunFigure, folder: Path) -> tuple[pd.DataFrame, Figure, dict]:
    table, fig = figure.draw(folder)
    return table, fig, of_run(figure, json.loads((folder / fmt.SUMMARY_FILE).read_text()))


if __name__ == "__main__":
    sys.exit(main())
