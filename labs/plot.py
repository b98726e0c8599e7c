"""``python -m labs plot N``: the lab's figures, from the student's runs, through analysis/.

Run figures are rendered exactly as ``python -m analysis`` renders them (the newest run
that provides each), so a lab's plot and the paper's figure of the same data agree.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

from analysis.catalog import FIGURES, render, save, save_figure
from analysis.load import Results, load_results
from labs.catalog import Lab
from labs.figures import OFFLINE_FIGURES, RUN_FIGURES

RUN_SPECS = {spec.name: spec for spec in (*FIGURES, *RUN_FIGURES)}


class PlotError(ValueError):
    """The figure cannot be drawn: no results given, or a name nothing draws."""


def known_figures() -> set[str]:
    return set(RUN_SPECS) | set(OFFLINE_FIGURES)


def plot(lab: Lab, results_dirs: list[Path], out: Path) -> list[Path]:
    """Draw every figure of ``lab`` into ``out``; returns the files written.

    Raises PlotError (which figure, what is missing) and analysis's MissingData or
    ResultsFormatError when the runs given cannot provide a figure.
    """
    matplotlib.use("Agg")
    written: list[Path] = []
    results: Results | None = None
    for name in lab.figures:
        if name in OFFLINE_FIGURES:
            table_of, draw = OFFLINE_FIGURES[name]
            table = table_of()
            written += save_figure(name, table, draw(table), out)
            continue
        if name not in RUN_SPECS:
            raise PlotError(f"lab {lab.number}: no figure called {name!r}; known: {', '.join(sorted(known_figures()))}")
        if not results_dirs:
            raise PlotError(f"lab {lab.number}'s {name} is drawn from your runs: give --results with your run's folder ({lab.run})")
        if results is None:
            results = load_results(results_dirs)
        spec = RUN_SPECS[name]
        table, fig = render(spec, results)
        written += save(spec, table, fig, out)
    return written
