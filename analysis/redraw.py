"""Draw figures again from what sits beside them, without the runs.

    python -m analysis.redraw docs/figures [NAME ...]

``python -m analysis`` writes, for each figure, the numbers it plots (<name>.csv) and what
else its drawing read (<name>.json: the figure's drawing and either its emulation context or
the summary.json keys a one-run figure reads). With both, a change to the drawing code (a
label, a legend, a layout) can be applied to the published figures in docs/figures, whose
runs are not in the repository. The numbers are not recomputed: a figure whose table must
change needs its runs again.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from analysis.catalog import RUN_FIGURES, by_name
from analysis.context import EmulationContext
from analysis.run_figure import RunFigure

log = logging.getLogger("analysis.redraw")
CATALOGUE, RUN = "catalogue", "run"


def catalogued(name: str, context: EmulationContext) -> dict:
    """What a catalogue figure's <name>.json holds: its drawing and its context."""
    return {"kind": CATALOGUE, "figure": name, "context": {
        "link_mbps": list(context.link_mbps), "switch_targets": list(context.switch_targets),
        "problems": list(context.problems), "link_delays": list(context.link_delays), "clocks": list(context.clocks)}}


def of_run(figure: RunFigure, summary: dict) -> dict:
    """What a one-run figure's <name>.json holds: its drawing and the summary keys it reads."""
    return {"kind": RUN, "figure": figure.name, "summary": {key: summary[key] for key in figure.summary_keys if key in summary}}


def redraw(csv: Path, drawn_by: dict) -> Figure:
    """The figure whose numbers are ``csv``, drawn as ``drawn_by`` (its <name>.json) says."""
    table = pd.read_csv(csv)
    if drawn_by["kind"] == CATALOGUE:
        context = drawn_by["context"]
        return by_name(drawn_by["figure"]).draw(table, EmulationContext(
            link_mbps=tuple(math.nan if rate is None else float(rate) for rate in context["link_mbps"]),
            switch_targets=tuple(context["switch_targets"]), problems=tuple(context["problems"]),
            link_delays=tuple(context["link_delays"]), clocks=tuple(context["clocks"])))
    figure = next(figure for figure in RUN_FIGURES if figure.name == drawn_by["figure"])
    return figure.redraw(table, drawn_by["summary"])


def redraw_folder(folder: Path, names: list[str] | None = None) -> list[Path]:
    """Redraw every figure in ``folder`` that has its <name>.json (or those ``names``);
    returns the PNGs written."""
    written = []
    for spec_path in sorted(folder.glob("*.json")):
        name = spec_path.stem
        if names and name not in names:
            continue
        fig = redraw(folder / f"{name}.csv", json.loads(spec_path.read_text()))
        for suffix in ("png", "pdf"):
            fig.savefig(folder / f"{name}.{suffix}", **({"dpi": 150} if suffix == "png" else {}))
        written.append(folder / f"{name}.png")
        log.info("redrew %s", name)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.redraw", description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a folder of figures written by python -m analysis (docs/figures)")
    parser.add_argument("names", nargs="*", help="only these figures (file names without suffix)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    matplotlib.use("Agg")
    written = redraw_folder(args.folder, args.names or None)
    if not written:
        log.error("nothing to redraw in %s: no <name>.json beside a <name>.csv", args.folder)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
