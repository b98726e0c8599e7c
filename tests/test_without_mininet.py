"""An install without Mininet (bootstrap.sh --user, or pip alone: docs/install.md) runs the
simulated clock, every dry run and the analysis; an emulated run says in one line what it
lacks. Mininet is hidden from the runner's process (``sys.modules['mininet'] = None``
makes every import of it fail as a missing module does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.config import CONFIG_DIR
from protocol.params import REPO_ROOT

HIDE_MININET = "import runpy, sys; sys.modules['mininet'] = None; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def run_without_mininet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", HIDE_MININET, str(REPO_ROOT / "run_experiment.py"), *args], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL, cwd=REPO_ROOT, check=False)


def test_the_simulated_clock_and_dry_runs_need_no_mininet(tmp_path: Path) -> None:
    config = str(CONFIG_DIR / "8workers.yaml")
    for dry in ([config, "--dry-run"], [config, "--dry-run", "--simulate"]):
        done = run_without_mininet(*dry)
        assert done.returncode == 0 and "point 0:" in done.stdout, done.stderr
    done = run_without_mininet(config, "--simulate", "--set", "methods=[switchml]", "--set", "workload.elements=4096",
                               "--set", "repetitions=1", "--out", str(tmp_path / "run"))
    assert done.returncode == 0 and (tmp_path / "run" / "summary.json").is_file(), done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="a run that is not root stops first at Mininet's need for root")
def test_an_emulated_run_without_mininet_says_what_it_lacks_in_one_line(tmp_path: Path) -> None:
    done = run_without_mininet(str(CONFIG_DIR / "8workers.yaml"), "--out", str(tmp_path / "run"))
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert done.returncode == 2 and len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert errors[0].endswith("Mininet is not installed, and an emulated run needs it: run scripts/bootstrap.sh as root, or apt "
                              "install mininet and make the venv see the system's packages (docs/install.md); --simulate runs "
                              "without it")
    assert not (tmp_path / "run").exists()
