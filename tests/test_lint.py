"""The code base stays free of unused names, undefined names and bugbear's likely bugs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from protocol.params import REPO_ROOT

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)


def test_ruff_finds_nothing() -> None:
    pytest.importorskip("ruff", reason="ruff (test extra) not installed")
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", str(REPO_ROOT)],
                          capture_output=True, text=True, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
