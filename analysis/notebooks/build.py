"""Write one notebook per figure in ``analysis.catalog.FIGURES`` into this directory.

    python -m analysis.notebooks.build

The notebooks are generated rather than hand-edited so they cannot drift from the
analysis code: each one is the same four cells around one figure name, and its
explanation is the figure's ``explanation`` in the catalog. Cell ids are fixed so
rebuilding an unchanged catalog leaves the files byte-identical (tests check this).
Needs the optional ``notebooks`` dependencies (nbformat).
"""

from __future__ import annotations

import logging
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from analysis.catalog import FIGURES, FigureSpec

log = logging.getLogger(__name__)

NOTEBOOK_DIR = Path(__file__).resolve().parent

_SETUP = '''\
%matplotlib inline
import sys
from pathlib import Path

REPO_ROOT = Path.cwd().resolve().parents[1]  # notebooks run from analysis/notebooks/
sys.path.insert(0, str(REPO_ROOT))

from analysis.catalog import by_name, render
from analysis.load import load_results

# A run directory or any parent of runs, e.g. REPO_ROOT / "results/ate_vs_workers".
# The default is the test fixture: real runs, but tiny (2-4 workers, small tensors), so it
# shows the figure, not the paper's results (tests/data/results_small/README.md).
RESULTS_DIR = REPO_ROOT / "tests/data/results_small"'''

_RENDER = """\
results = load_results([RESULTS_DIR])
table, fig = render(by_name("{name}"), results)
table"""

_DATA_NOTE = """
**Data.** Set `RESULTS_DIR` in the next cell. When several runs sweep the parameter this
figure needs, the newest one is used. The table below the code is exactly what is plotted
(`python -m analysis` writes it as `docs/figures/{name}.csv`)."""


def notebook_for(spec: FigureSpec) -> nbformat.NotebookNode:
    """The notebook for one figure: explanation, setup, table, figure."""
    cells = [
        new_markdown_cell(spec.explanation.strip() + "\n" + _DATA_NOTE.format(name=spec.name), id="explanation"),
        new_code_cell(_SETUP, id="setup"),
        new_code_cell(_RENDER.format(name=spec.name), id="table"),
        new_code_cell("fig", id="figure"),
    ]
    notebook = new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["language_info"] = {"name": "python"}
    return notebook


def notebook_path(spec: FigureSpec) -> Path:
    return NOTEBOOK_DIR / f"{spec.name}.ipynb"


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    for spec in FIGURES:
        nbformat.write(notebook_for(spec), notebook_path(spec))
        log.info("wrote %s", notebook_path(spec))


if __name__ == "__main__":
    main()
