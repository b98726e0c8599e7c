"""What every shipped config becomes once loaded: its points' resolved data, topology,
deadlines and the worker spec of each method, as plain JSON.

tests/test_golden.py compares it with tests/data/golden_plans.json, recorded before the
plug-in axis for in-network aggregation (issue 39) was built: a refactor of how configs are
parsed and methods are dispatched must not change what any of today's configs runs.
``python -m tests.golden_plans`` writes the file again, for a change that means to alter a plan.
"""

from __future__ import annotations

import json
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


if __name__ == "__main__":
    write(plans())
    print(f"wrote {GOLDEN}")
