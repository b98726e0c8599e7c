"""Regenerate every paper figure whose data is present.

    python -m analysis RESULTS_DIR [RESULTS_DIR ...] [--out docs/figures]

Each RESULTS_DIR may be one run or any parent of runs (results/, results/<config>/).
For each figure the PNG, PDF and the CSV of the numbers behind it are written to --out;
figures whose sweep is missing from the results are logged as skipped, not failed, so one
command serves whatever subset of the experiments has been run.
"""

from __future__ import annotations

import logging
import sys


from analysis.catalog import FIGURES, figure_command_args, render, save
from analysis.load import load_results
from analysis.tables import MissingData

log = logging.getLogger("analysis")


def main(argv: list[str] | None = None) -> int:
    """Draw every figure it can; returns 0 if at least one figure was written."""
    args = figure_command_args("python -m analysis", __doc__.splitlines()[0], argv)

    results = load_results(args.results)
    written, skipped = [], []
    for spec in FIGURES:
        try:
            table, fig = render(spec, results)
        except MissingData as reason:
            log.warning("skipped %s: %s", spec.name, reason)
            skipped.append(spec.name)
            continue
        paths = save(spec, table, fig, args.out)
        log.info("wrote %s", ", ".join(str(path) for path in paths))
        written.append(spec.name)
    log.info("%d figure(s) written to %s, %d skipped%s", len(written), args.out, len(skipped),
             f" ({', '.join(skipped)})" if skipped else "")  # fmt: skip
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
