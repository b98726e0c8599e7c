"""The shape of a run folder: its files, each table's header, summary.json's keys.

The restructured code must write what the code before it wrote (tests/data/results_shapes.json,
recorded from runs of the last commit before the restructuring, and extended since only by
keys documented in docs/results-format.md: training_steps.csv's ``bytes_sent`` and ``bytes_received``, runs.csv's
``bytes_sent`` and ``bytes_received``, summary.json's ``retransmissions_waiting``, ``retransmissions_slot_complete`` and
``retransmissions_after_update_loss``,
the network's ``tcp_congestion_control``,
summary.json's ``data_path`` (``switchml_data_path`` before it named its protocol), ``max_machine_steal_fraction`` and ``simulated``,
fidelity.csv's ``cpu_steal_fraction``, runs.csv's and summary.json's ``socket_errors``,
``socket_errnos`` and ``rejected_results``, timeline.csv's ``bin_ms``, summary.json's ``provenance``, and a shared-switch
run's switch_counters.csv, in the one-job runs' format): a reader
of the results format, or a user's notebook, must not notice. Values differ from run to
run; the shape must not.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import methods
from protocol.params import REPO_ROOT

GOLDEN = REPO_ROOT / "tests" / "data" / "results_shapes.json"


def keys_of(value: Any) -> Any:
    """A JSON value's key tree: dicts by key (entries keyed by a point, a job or a method
    collapse to one '*' entry: which of them exist depends on the config), lists by the
    union of their items' trees, scalars as None."""
    if isinstance(value, dict):
        tree = {key: keys_of(item) for key, item in value.items()}
        if tree and all(key.isdigit() or key in methods.NAMES for key in tree):
            merged: dict[str, Any] = {}
            for item in tree.values():
                merged = _merge(merged, item)
            return {"*": merged}
        return tree
    if isinstance(value, list):
        merged_list: Any = None
        for item in value:
            merged_list = _merge(merged_list, keys_of(item))
        return [merged_list] if merged_list is not None else []
    return None


def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {key: _merge(a.get(key), b.get(key)) for key in sorted(set(a) | set(b))}
    return a if b is None else b


def shape(run_dir: Path) -> dict[str, Any]:
    files = sorted(p.name for p in run_dir.iterdir() if p.is_file())
    headers = {}
    for name in files:
        if name.endswith(".csv"):
            with (run_dir / name).open(newline="") as f:
                headers[name] = next(csv.reader(f), [])
    return {"files": files, "headers": headers, "summary": keys_of(json.loads((run_dir / "summary.json").read_text()))}


def differences(expected: Any, got: Any, where: str = "") -> list[str]:
    """Where two shapes differ (an empty list matches any list: a run with no saturated
    process lists none, one with some lists their keys)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        found = [f"{where}.{key}: missing" for key in expected if key not in got]
        found += [f"{where}.{key}: not written before" for key in got if key not in expected]
        for key in expected.keys() & got.keys():
            found += differences(expected[key], got[key], f"{where}.{key}")
        return found
    if isinstance(expected, list) and isinstance(got, list):
        if expected and got and all(isinstance(x, (dict, list)) or x is None for x in expected + got):
            return differences(expected[0], got[0], f"{where}[]")
        return [] if not expected or not got or expected == got else [f"{where}: {got} where {expected} was written"]
    return [] if expected == got else [f"{where}: {got!r} where {expected!r} was written"]


def shape_differences(kind: str, run_dir: Path) -> list[str]:
    """How ``run_dir``'s shape differs from the recorded one of a run of ``kind``."""
    return differences(json.loads(GOLDEN.read_text())[kind], shape(run_dir))


if __name__ == "__main__":  # record: python -m tests.results_shape sweep=RUN shared=RUN training=RUN
    import sys

    shapes = {arg.split("=", 1)[0]: shape(Path(arg.split("=", 1)[1])) for arg in sys.argv[1:]}
    GOLDEN.write_text(json.dumps(shapes, indent=1, sort_keys=True) + "\n")
