"""run_experiment.py's command line: validation and target choice fail fast, before any network."""

from __future__ import annotations

import subprocess
import sys

import pytest

from protocol.params import REPO_ROOT
from switches.targets import detect_bmv2

MAIN_CONFIG = REPO_ROOT / "configs" / "8workers.yaml"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO_ROOT / "run_experiment.py"), *args],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_dry_run_lists_every_sweep_point() -> None:
    done = run(str(MAIN_CONFIG), "--dry-run", "--switch", "embedded", "--set", "sweep={param: topology.workers, values: [2, 4]}")
    assert done.returncode == 0, done.stderr
    assert "switch target: embedded" in done.stdout
    assert "point 0 topology.workers=2: 2 workers (star)" in done.stdout
    assert "point 1 topology.workers=4: 4 workers (star)" in done.stdout


def test_bad_override_exits_2_naming_the_key() -> None:
    done = run(str(MAIN_CONFIG), "--dry-run", "--set", "protocol.pool_size=0")
    assert done.returncode == 2
    assert "protocol.pool_size: 0 is less than the minimum of 1" in done.stderr


@pytest.mark.skipif(not detect_bmv2(), reason="bmv2 is installed here")
def test_bmv2_where_it_is_missing_fails_at_once_saying_what_and_where_to_get_it() -> None:
    done = run(str(MAIN_CONFIG), "--switch", "bmv2", "--dry-run")
    assert done.returncode == 2
    assert "switch target 'bmv2' needs simple_switch" in done.stderr
    assert "vagrant up" in done.stderr
