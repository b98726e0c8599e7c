"""ATP's native worker through Mininet, end to end: ``run_experiment.py`` on a real network.

An emulated ATP job whose config asks for the native data path (``native``, or ``auto`` where
worker.c builds, as it does wherever these tests run) must verify, its summary.json must say
which loop ran and whose (ATP's: its record's resolver), and each rank's log must show that
the worker ran worker.c. The embedded switch: the cheapest target.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

import run_experiment
from experiments.config import CONFIG_DIR

pytestmark = pytest.mark.mininet

N_WORKERS, K, ELEMENTS = 3, 256, 8192


@pytest.mark.parametrize("data_path", ["native", "auto"])
def test_an_emulated_atp_job_runs_the_native_worker_and_says_so(data_path: str, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("Mininet needs root")
    out = tmp_path / "run"
    settings = [f"topology.workers={N_WORKERS}", "methods=[atp]", "repetitions=1", f"workload.elements={ELEMENTS}", f"protocol.k={K}",
                f"protocol.data_path={data_path}"]
    code = run_experiment.main([str(CONFIG_DIR / "8workers.yaml"), "--switch", "embedded", "--out", str(out),
                                *(arg for setting in settings for arg in ("--set", setting))])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] and pd.read_csv(out / "runs.csv")["verified"].all()
    chosen = summary["data_path"]
    assert (chosen["protocol"], chosen["requested"], chosen["used"]) == ("atp", data_path, "native"), chosen
    assert "hosts/atp/native/worker.c" in chosen["reason"]
    logs = sorted((out / "logs").rglob("*rank*.log"))
    ran = [line for path in logs for line in path.read_text().splitlines() if "ATP job" in line and " runs " in line]
    assert len(ran) == N_WORKERS and all("hosts/atp/native/worker.c" in line for line in ran), ran
