"""What every shipped config becomes once loaded: its points' resolved data, topology,
deadlines and the worker spec of each method, as plain JSON.

tests/test_golden.py compares it with tests/data/golden_plans.json, recorded before the
plug-in axis for in-network aggregation (issue 39) was built: a refactor of how configs are
parsed and methods are dispatched must not change what any of today's configs runs.
``python -m tests.golden_plans`` writes the file again, for a change that means to alter a plan
(``--simulated``: also tests/data/golden_simulated_runs.json, the results of short runs on the
simulated clock, which are deterministic).
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from experiments.config import CONFIG_DIR, load_experiment
from experiments.harness import worker_spec
from protocol.params import REPO_ROOT

GOLDEN = Path(__file__).resolve().parent / "data" / "golden_plans.json"
TARGETS = ("embedded", "ebpf")
"""The targets this machine has (bmv2's toolchain is optional); each has its own link rates and k."""


def shipped_configs() -> list[Path]:
    return sorted(path for path in CONFIG_DIR.glob("*.yaml") if path.name != "experiment.schema.yaml")


def plan(config: Path, target: str) -> dict[str, Any]:
    """``config`` on ``target`` as the runner gets it: every point's resolved config, its hosts
    and links, each method's deadline and worker spec."""
    experiment = load_experiment(config, [f"switch.target={target}"])
    return {
        "link_rate_source": experiment.link_rate_source,
        "points": [
            {
                "index": point.index,
                "sweep": [point.sweep_param, point.sweep_value],
                "data": point.data,
                "hosts": [[host.name, host.ipv4] for host in point.topology.hosts],
                "link_mbps": point.topology.link_mbps,
                "round_trip_s": point.topology.round_trip_s,
                "elements": point.workload_info.elements,
                "deadlines": {method: point.job_limit(method).seconds for method in point.methods},
                "specs": {method: asdict(worker_spec(point, method)) for method in point.methods},
            }
            for point in experiment.points
        ],
    }


def plans() -> dict[str, Any]:
    return {f"{config.stem}@{target}": plan(config, target) for config in shipped_configs() for target in TARGETS}


def as_json(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples become lists), so the two sides compare, with
    this checkout's folder written ``<repo>`` (a config's paths are resolved against it)."""
    return json.loads(json.dumps(value, sort_keys=True, default=str).replace(str(REPO_ROOT), "<repo>"))


def write(recorded: dict[str, Any]) -> None:
    """One line per config and target, so a diff shows which plans changed."""
    lines = (f"{json.dumps(key)}: {json.dumps(value, sort_keys=True)}" for key, value in sorted(as_json(recorded).items()))
    GOLDEN.write_text("{\n" + ",\n".join(lines) + "\n}\n")


SIMULATED_GOLDEN = GOLDEN.parent / "golden_simulated_runs.json"
SIMULATED_RUNS: dict[str, list[str]] = {
    "8workers": ["workload.elements=65536", "repetitions=1"],
    "8workers_lossy": ["workload.elements=65536", "repetitions=1", "topology.link.loss=0.01", "methods=[switchml]"],
}
"""Short runs on the simulated clock, whose results are deterministic: name -> --set overrides of configs/8workers.yaml."""
SIMULATED_COLUMNS = ("method", "rank", "tat_s", "packets_sent", "packets_received", "retransmissions", "timeouts", "duplicates",
                     "verified", "max_abs_error")


SUMMARY_KEYS = ("tat_s", "ate_per_s", "retransmissions", "verified", "line_rate_bound_ate_per_s", "pace_bound_ate_per_s",
                "pace_bound", "ate_fraction_of_pace_bound", "pace_checked")
"""summary.json's per-method entries that follow from the runs and the models (bound, pace)."""


def simulated_results(out: Path) -> dict[str, list[dict[str, str]]]:
    """Each of ``SIMULATED_RUNS`` run by run_experiment.py --simulate into ``out``: its runs.csv rows, in those columns,
    and its summary's ``SUMMARY_KEYS`` per method."""
    found = {}
    for name, overrides in SIMULATED_RUNS.items():
        run_dir = out / name
        # The target named: --simulate simulates the one an emulated run would pick here, which
        # differs between machines (bmv2 where it is installed, at its slower rate).
        command = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(CONFIG_DIR / "8workers.yaml"), "--simulate",
                   "--switch", "ebpf", "--out", str(run_dir), *(arg for override in overrides for arg in ("--set", override))]
        subprocess.run(command, check=True, capture_output=True, cwd=REPO_ROOT)
        with (run_dir / "runs.csv").open() as rows:
            found[name] = [{column: row[column] for column in SIMULATED_COLUMNS} for row in csv.DictReader(rows)]
        summary = json.loads((run_dir / "summary.json").read_text())["methods"]
        found[f"{name} summary"] = {method: {key: value for key, value in entry.items() if key in SUMMARY_KEYS}
                                    for method, entry in sorted(summary.items())}
    return found


if __name__ == "__main__":
    write(plans())
    if "--simulated" in sys.argv:  # a few minutes: every run of SIMULATED_RUNS
        with tempfile.TemporaryDirectory() as folder:
            SIMULATED_GOLDEN.write_text(json.dumps(simulated_results(Path(folder)), indent=1) + "\n")
