"""The version of an outside tool, as its ``--version`` prints it (runs' provenance)."""

from __future__ import annotations

import shutil
import subprocess

TOOL_TIMEOUT_S = 10.0


def first_line(argv: list[str]) -> str | None:
    """The first non-empty line ``argv`` prints (a tool's ``--version``, on stdout or, as
    simple_switch does, on stderr); None when the tool is missing, fails or hangs."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return lines[0] if done.returncode == 0 and lines else None
