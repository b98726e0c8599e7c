"""The training workload end to end: run_experiment.py trains through Mininet, is interrupted
in its second method, and resumes without training the first one again.

One short training (4 workers, 60 steps, SwitchML and the ring) on the embedded switch, as
a user's command would run it: every step verified, every series' learning curve written
once, and nothing of the network left behind after the interruption or the resumed run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from protocol.params import REPO_ROOT
from tests.experiment_runs import disturb_mid_run, experiment_argv, leftovers
from tests.results_shape import shape_differences

pytestmark = [pytest.mark.mininet, pytest.mark.slow]

if os.geteuid() != 0:
    pytest.skip("Mininet tests need root", allow_module_level=True)

CONFIG = REPO_ROOT / "configs" / "training_convergence.yaml"
STEPS = 60
"""Long enough that the ring (about 50 ms a step here) is still training when it is interrupted."""
WORKERS = 4
SHORT = [f"topology.workers={WORKERS}", f"workload.steps={STEPS}", "methods=[switchml, ring]"]
SERIES = {"exact", "switchml 8-bit", "switchml 5-bit", "switchml", "ring"}


def test_short_training_verifies_every_step_and_resumes_after_an_interrupt(tmp_path: Path) -> None:
    out = tmp_path / "run"

    def interrupt_once_the_ring_has_trained(runner: subprocess.Popen, worker: int) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            steps = out / "training_steps.csv"
            if steps.exists() and any(line.startswith("ring,ring,network,,1,") for line in steps.read_text().splitlines()):
                break
            time.sleep(0.02)
        runner.send_signal(signal.SIGINT)

    code, output = disturb_mid_run(out, SHORT, "/work/point0/ring", interrupt_once_the_ring_has_trained, config=CONFIG)
    assert code == 130, output
    partial = pd.read_csv(out / "training_steps.csv")
    assert (partial["series"] == "switchml").sum() == STEPS + 1  # the first method finished
    assert 0 < (partial["series"] == "ring").sum() <= STEPS  # the second was interrupted
    assert not leftovers(str(out))

    argv = experiment_argv(out, *SHORT, config=CONFIG)
    argv[argv.index("--out")] = "--resume"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "switchml: training already in" in done.stderr and "skipped (resume)" in done.stderr

    steps = pd.read_csv(out / "training_steps.csv")
    assert set(steps["series"]) == SERIES
    assert not steps.duplicated(["series", "step"]).any()
    assert (steps.groupby("series")["step"].agg(list) == [list(range(STEPS + 1))] * len(SERIES)).all()
    network = steps[(steps["source"] == "network") & (steps["step"] > 0)]
    assert network["verified"].all() and (network["allreduce_s"] > 0).all()
    assert network.groupby("series")["emulated_time_s"].apply(lambda times: times.is_monotonic_increasing).all()

    runs = pd.read_csv(out / "runs.csv")  # one all-reduce job per step, every worker once
    assert len(runs) == 2 * STEPS * WORKERS
    assert not runs.duplicated(["method", "repetition", "rank"]).any() and runs["verified"].all()
    assert set(runs["repetition"]) == set(range(1, STEPS + 1))

    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True
    by_series = {row["series"]: row for row in summary["training"]}
    assert set(by_series) == SERIES
    assert by_series["switchml"]["final_param_diff"] < 1e-5  # float32 rounding, not quantization, apart from exact
    assert by_series["switchml 5-bit"]["final_param_diff"] > 1e-3
    assert "switchml 5-bit" in done.stdout and "vs exact" in done.stdout
    assert not shape_differences("training", out)  # the files, columns and summary keys of before the restructuring
    assert not leftovers(str(out))
