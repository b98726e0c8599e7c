"""The results format (docs/results-format.md): what a run writes and the analysis reads.

The writer (experiments/) and the reader (analysis/) both import this module, so a name
that one side writes and the other expects is written down once.
"""

from __future__ import annotations

import shlex
from pathlib import Path

MACHINE = "machine"
"""fidelity.csv's row for the whole machine: busy share of all cores (from /proc/stat)."""


def resume_command(run_dir: Path) -> str:
    """The command that continues ``run_dir`` (its own config.yaml is the config it ran with),
    quoted for a shell, so that it can be pasted back whatever the path holds."""
    return shlex.join(["run_experiment.py", str(run_dir / "config.yaml"), "--resume", str(run_dir)])
