"""Measuring a calibration: one bounded search per target, k and worker count.

Each search is experiments/capacity.py's: probes of a few seconds each, doubling (or
halving) the link rate from the target's shipped rate for that k until one rate keeps up
and the next does not, then bisecting between them. The rate kept is the fastest that kept
up less ``MARGIN``, rounded down to two significant digits, so that a config's main job,
which adds the TCP baselines and more repetitions to SwitchML's probe, still keeps up.
The file is written after every search, so an interrupted calibration keeps what it measured.

Two modes: ``quick`` measures what the config runs (its k and its most workers), one
short attempt per rate and one bisection; ``full`` every k the target builds and each worker
count of the config, two attempts per rate, two repetitions of twice the data, and three
bisections.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import methods
from experiments.calibration import record
from experiments.capacity import Probe, Prober, ProbeSettings, most_probes, search
from experiments.config import Experiment
from switches.targets import AUTO, REGISTRY

PROBED = methods.SWITCHML
"""The method a calibration probes: the method under study, whose rates ``bw_mbps: target`` gives
every method of a config (benchmarks/emulation_capacity.py measures the others')."""
MARGIN = 0.25
"""The share below the fastest rate that kept up that a calibrated rate keeps, for the main
job's TCP baselines and repetitions, which SwitchML's probe leaves out: the shipped bmv2 rate
keeps as much (1.5 of the 2 Mbit/s its probes kept up with; the eBPF and embedded rates keep
more, benchmarks/README.md, "Emulation capacity")."""
FLOOR_MBPS = 0.25
CEILING_MBPS = 160.0
"""The search's bounds: below the floor no job of the main config's size finishes in a
sensible time; above the ceiling no 2-core machine has kept up (benchmarks/README.md)."""
FIRST_GUESS_MBPS = 2.5
"""Where a search starts for a k the target ships no rate for."""


@dataclass(frozen=True)
class Mode:
    name: str
    settings: ProbeSettings
    bisections: int
    every_k: bool
    """Every k the target builds (else the config's), at each worker count of the config (else its most)."""


MODES = {
    "quick": Mode("quick", ProbeSettings(seconds=1.0, repetitions=1, attempts=1), bisections=1, every_k=False),
    "full": Mode("full", ProbeSettings(seconds=2.0, repetitions=2, attempts=2), bisections=3, every_k=True),
}


@dataclass(frozen=True)
class Search:
    """One (target, k, workers) to measure, and where its search starts."""

    target: str
    k: int
    workers: int
    data_path: str
    start_mbps: float

    def __str__(self) -> str:
        return f"{self.target}, k = {self.k}, {self.workers} workers (from {self.start_mbps:g} Mbit/s)"


def targets_of(experiment: Experiment) -> list[str]:
    """The config's target, or for ``auto`` every target this machine runs (``auto`` may pick
    any of them, for instance the embedded switch where links need a delay line); a dry run
    that is not root also lists those only root can tell it runs."""
    asked = experiment.data["switch"]["target"]
    if asked != AUTO:
        return [asked]
    return [name for name, target in REGISTRY.items() if not (problems := target.missing()) or target.undecided(problems)]


def plan(experiment: Experiment, mode: Mode, targets: Iterable[str]) -> list[Search]:
    """The searches ``mode`` makes for ``experiment`` on ``targets``."""
    ks = sorted({int(p.protocol["k"]) for p in experiment.points})
    workers = sorted({len(p.topology.hosts) for p in experiment.points})
    data_path = experiment.data["protocol"]["data_path"]
    searches = []
    for name in targets:
        target = REGISTRY[name]
        for k in ([k for k in methods.k_choices() if target.builds(k)] if mode.every_k else [k for k in ks if target.builds(k)]):
            for count in (workers if mode.every_k else workers[-1:]):
                start = target.link_mbps(k) or FIRST_GUESS_MBPS
                searches.append(Search(name, k, count, data_path, start))
    return searches


def most_runs(searches: Iterable[Search], mode: Mode) -> int:
    """The most probe runs ``searches`` take (a progress bar's total)."""
    return sum(most_probes(s.start_mbps, FLOOR_MBPS, CEILING_MBPS, mode.bisections) * mode.settings.attempts for s in searches)


def with_margin(capacity_mbps: float) -> float:
    """``capacity_mbps`` less MARGIN, rounded down to two significant digits."""
    rate = capacity_mbps * (1 - MARGIN)
    scale = 10 ** (math.floor(math.log10(rate)) - 1)
    return float(f"{math.floor(rate / scale + 1e-9) * scale:.2g}")


def probe_record(probe: Probe) -> dict[str, object]:
    """What the file keeps of a probe: its verdict, why, the machine's state, and its results folder."""
    return {"link_mbps": probe.link_mbps, "attempt": probe.attempt, "keeps_up": probe.keeps_up,
            "share_of_bound": probe.share_of_bound, "kept_up": probe.kept_up, "not_kept_up_because": probe.not_kept_up_because,
            "verified": probe.verified, "data_path": probe.data_path, "machine_busy": probe.machine_busy,
            "load_before": probe.load_before, "measured_utc": probe.measured_utc, "run_dir": probe.run_dir}


def measure(search_: Search, mode: Mode, runs_dir: Path, on_probe: Callable[[Probe], None],
            on_start: Callable[[str], None]) -> dict[str, object]:
    """One search, as the file's entry."""
    load_before = [round(load, 2) for load in os.getloadavg()]
    measured_utc = record.now_utc()
    prober = Prober(PROBED, search_.target, search_.workers, search_.k, search_.data_path, mode.settings,
                    runs_dir / f"{search_.target}-{search_.workers}w-k{search_.k}", on_probe,
                    lambda what: on_start(f"{search_.target} k={search_.k} {search_.workers}w: {what}"),
                    extra=["name=calibration"])
    capacity = search(prober.keeps_up, search_.start_mbps, FLOOR_MBPS, CEILING_MBPS, mode.bisections)
    return {"target": search_.target, "k": search_.k, "workers": search_.workers, "data_path": search_.data_path,
            "capacity_mbps": capacity, "rate_mbps": None if capacity is None else with_margin(capacity),
            "mode": mode.name, "measured_utc": measured_utc, "load_before": load_before,
            "probes": [probe_record(p) for p in prober.probes]}


def calibrate(searches: list[Search], mode: Mode, path: Path, runs_dir: Path, on_probe: Callable[[Probe], None],
              on_start: Callable[[str], None], on_entry: Callable[[dict[str, object]], None]) -> None:
    """Run ``searches`` one after another, merging each entry into the file at ``path`` as it is measured."""
    for search_ in searches:
        entry = measure(search_, mode, runs_dir, on_probe, on_start)
        existing = record.read(path) if path.is_file() else None
        record.write(path, record.merged(existing, [entry], MARGIN, record.now_utc()))
        on_entry(entry)
