"""The calibration file: where it is, what it holds, and which of its rates a config gets.

It lives in the results folder (``results/calibration.yaml``: the tree's in a checkout,
the working folder's otherwise), beside the runs it sets the rates of, where a dry run as
the user and a root run read the same file (a home folder differs under sudo), and it is
plain YAML for the user to read: the machine, each rate's measured capacity, the margin
kept, when it was measured, the load then, and every probe with its results folder.
``SWITCHML_CALIBRATION`` names another file, or, set empty, none (the tests use the
shipped rates whatever the machine has measured).

A config running on target t at elements per packet k with at most w workers in any point
gets the entry of t at k, for the same ``protocol.data_path`` setting, measured with the
fewest workers no fewer than w: a rate that keeps up with more workers keeps up with fewer
(each worker adds its packets to the switch's and the machine's load). Without such an entry,
or from another machine, the target's shipped rate applies, and the source says why.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from base.yamlschema import load_schema, load_yaml, validate
from protocol.params import RESULTS_DIR

FILE_VARIABLE = "SWITCHML_CALIBRATION"
"""The environment variable naming the calibration file (empty: use none)."""
DEFAULT_FILE = RESULTS_DIR / "calibration.yaml"
SCHEMA_PATH = Path(__file__).with_name("calibration.schema.yaml")
FORMAT = 1
SOURCE_PREFIX = "calibration"
"""How a calibrated rate's source begins (summary.json's ``link_mbps_source``)."""
HEADER = ("# Link rates this machine keeps up with, measured by run_experiment.py --calibrate (docs/targets.md).\n"
          "# topology.link.bw_mbps: target runs at rate_mbps of the matching entry; delete the file to use the shipped rates.\n")


def calibration_file() -> Path | None:
    """The calibration file this process reads and writes (None: none, ``SWITCHML_CALIBRATION`` empty)."""
    named = os.environ.get(FILE_VARIABLE)
    if named is None:
        return DEFAULT_FILE.absolute()  # an installed testbed's results/ is the working folder's
    return Path(named).absolute() if named else None


def this_machine() -> dict[str, Any]:
    """What identifies the machine rates were measured on (host, cores, CPU model), and what
    describes it (kernel, memory)."""
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.partition(":")[2].strip()
                break
    except OSError:
        pass
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {"host": platform.node(), "cpus": os.cpu_count() or 1, "cpu_model": model, "kernel": platform.release(),
            "memory_gb": round(memory / 1e9, 1)}


def now_utc() -> str:
    """The time the file records (ISO 8601, to the second)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def same_machine(recorded: Mapping[str, Any], here: Mapping[str, Any]) -> bool:
    return all(recorded.get(key) == here.get(key) for key in ("host", "cpus", "cpu_model"))


@dataclass(frozen=True)
class CalibratedRate:
    """The entry a config's rate comes from."""

    path: Path
    entry: Mapping[str, Any]

    @property
    def mbps(self) -> float:
        return float(self.entry["rate_mbps"])

    def source(self) -> str:
        """How the run's header and summary.json name it (``link_mbps_source``)."""
        e = self.entry
        return (f"{SOURCE_PREFIX} {self.path}: {e['target']} at k = {e['k']} for {e['workers']} workers, data_path {e['data_path']}, "
                f"{e['mode']}, measured {e['measured_utc']}")


def read(path: Path) -> dict[str, Any]:
    """The calibration in ``path``, validated (ConfigError naming the file and the key)."""
    data = load_yaml(path)
    validate(data, load_schema(SCHEMA_PATH), f"{path} (the calibration file: run --calibrate again, or delete it)")
    return data


def write(path: Path, calibration: Mapping[str, Any]) -> None:
    """Write ``calibration`` to ``path`` whole or not at all (a temporary file renamed over it)."""
    validate(dict(calibration), load_schema(SCHEMA_PATH), "the calibration to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(HEADER + yaml.safe_dump(dict(calibration), sort_keys=False, width=130))
    partial.replace(path)


def merged(existing: Mapping[str, Any] | None, entries: Iterable[Mapping[str, Any]], margin: float, now_utc: str) -> dict[str, Any]:
    """``existing`` (None: no file yet) with ``entries`` replacing its entries of the same
    target, k, workers and data path; a file from another machine, or kept with another
    margin, is replaced whole, since its rates would not mean the same."""
    here = this_machine()
    kept: list[Mapping[str, Any]] = []
    if existing is not None and same_machine(existing["machine"], here) and existing["margin"] == margin:
        kept = list(existing["rates"])
    new = list(entries)
    keys = {entry_key(entry) for entry in new}
    rates = [entry for entry in kept if entry_key(entry) not in keys] + new
    rates.sort(key=entry_key)
    return {"format": FORMAT, "machine": here, "updated_utc": now_utc, "margin": margin, "rates": rates}


def entry_key(entry: Mapping[str, Any]) -> tuple[str, int, int, str]:
    return entry["target"], entry["k"], entry["workers"], entry["data_path"]


@dataclass(frozen=True)
class Lookup:
    """A calibrated rate, or why there is none (None: no calibration file in use)."""

    rate: CalibratedRate | None
    why_not: str | None = None


def find_rate(target: str, k: int, workers: int | None, data_path: str) -> Lookup:
    """The calibrated rate of ``target`` at ``k`` for ``workers`` (the most of any point; None:
    not known before the points are resolved), asked with ``data_path``, from the calibration
    file, or why it gives none."""
    path = calibration_file()
    if path is None or not path.is_file():
        return Lookup(None)
    calibration = read(path)
    if not same_machine(calibration["machine"], this_machine()):
        m = calibration["machine"]
        return Lookup(None, f"{path} was measured on another machine ({m['host']}, {m['cpus']} cores, {m['cpu_model']})")
    wanted = f"{target} at k = {k}, data_path {data_path}, for {workers if workers is not None else 'a known number of'} workers or more"
    if workers is None:
        return Lookup(None, f"{path} has no entry for {wanted}")
    fitting = [entry for entry in calibration["rates"]
               if (entry["target"], entry["k"], entry["data_path"]) == (target, k, data_path) and entry["workers"] >= workers]
    if not fitting:
        return Lookup(None, f"{path} has no entry for {wanted}")
    entry = min(fitting, key=lambda e: e["workers"])
    if entry["rate_mbps"] is None:
        return Lookup(None, f"{path}: {target} at k = {k} for {entry['workers']} workers kept up at none of the rates tried")
    return Lookup(CalibratedRate(path, entry))
