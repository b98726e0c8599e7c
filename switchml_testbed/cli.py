"""The installed commands: ``switchml-run``, ``switchml-analysis`` and ``switchml-labs``.

Each is exactly ``python run_experiment.py``, ``python -m analysis`` or ``python -m labs``
run in the testbed's tree, from whichever folder it is called: it puts the tree first on
``sys.path`` of its own process (never of the user's Python: site-packages keeps one
name, switchml_testbed) and runs the script or the module as ``__main__``. The commands'
own parsers give ``--version`` (release.add_version_option).
"""

from __future__ import annotations

import runpy
import sys

from switchml_testbed.release import tree_root


def _run_in_tree(module: str) -> None:
    root = str(tree_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    runpy.run_module(module, run_name="__main__")


def run() -> None:
    """``switchml-run CONFIG ...``: python run_experiment.py."""
    _run_in_tree("run_experiment")


def analysis() -> None:
    """``switchml-analysis RESULTS ... --out DIR``: python -m analysis."""
    _run_in_tree("analysis")


def labs() -> None:
    """``switchml-labs list|skeleton|grade|...``: python -m labs."""
    _run_in_tree("labs")


COMMANDS = {"run": run, "analysis": analysis, "labs": labs}


def main() -> None:
    """``python -m switchml_testbed run|analysis|labs ARGS``: the same commands for a Python
    whose scripts folder is not on the PATH (``python -m labs`` works only in the tree's root)."""
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(f"usage: python -m switchml_testbed {{{','.join(COMMANDS)}}} [ARGS ...] (e.g. python -m switchml_testbed labs list)",
              file=sys.stderr)
        sys.exit(2)
    command = sys.argv.pop(1)
    sys.argv[0] = f"switchml-{command}"
    COMMANDS[command]()
