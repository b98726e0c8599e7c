"""The capacity probe: does a switch target keep up with an in-network method on links of a given rate?

A probe is one real run of ``run_experiment.py`` (Mininet, the target, the workers, the
results tables): configs/8workers.yaml with the probed method only (SwitchML for a
calibration, any in-network method of the registry for benchmarks/emulation_capacity.py),
the link rate, worker count, elements per packet and switch target overridden with
``--set``, and a tensor sized to a
number of seconds of line-rate data at the probed rate (so jobs are about equally long
whatever the rate), never smaller than the config's own (131,072 elements, whose float32
lead round is 1.5 % of it). A rate keeps up when the method's median ATE/s reaches
KEEPS_UP_SHARE of its line-rate bound and the run's ``kept_up`` is true
(docs/results-format.md: no saturated process or machine, no lost frame, no job paced by the
emulator). A machine shared with other work can only make a probe slower, never faster, so
a rate is tried up to a number of attempts and keeps up if any attempt does.

``search`` brackets the highest rate that keeps up by doubling or halving, then bisects.
benchmarks/emulation_capacity.py tables the probes; ``run_experiment.py --calibrate``
(experiments/calibration/) turns searches into the rates ``bw_mbps: target`` uses.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import pandas as pd

from experiments.config import load_experiment
from methods import Method
from protocol import params
from protocol import results_format as fmt
from protocol.params import REPO_ROOT
from protocol.results_format import MACHINE

CONFIG = REPO_ROOT / "configs" / "8workers.yaml"
"""The config every probe runs, the probed method only, with the probed values set."""
KEEPS_UP_SHARE = 0.95
"""A rate keeps up when the probed method reaches this share of its line-rate bound (and kept_up holds)."""
KEPT_UP_REASONS = ("saturated_processes", "saturated_jobs", "switch_lost_frames", "paced_by_emulator")
"""summary.json's lists of jobs that turned kept_up false."""
PROBE_TIMEOUT_S = 1800
"""A probe waits for the network lock (other runs on the machine) and then runs its jobs."""


@dataclass(frozen=True)
class Probe:
    """One attempt at one link rate: a run's summary and CPU, reduced to a table's row."""

    target: str
    method: str
    """The in-network method probed (methods.REGISTRY's name), alone in its run."""
    workers: int
    k: int
    data_path: str
    """The method's worker loop that ran (native or python: summary.json's data_path); empty for
    a protocol with one loop (``Aggregation.data_path`` None), which ``protocol.data_path`` does not choose."""
    link_mbps: float
    attempt: int
    elements: int
    repetitions: int
    ate_per_s: float
    """The method's median aggregated tensor elements per second."""
    share_of_bound: float
    """Median ATE/s over the method's line-rate bound."""
    share_of_pace: float
    """Median ATE/s over the pace the network allows (experiments/pace.py); NaN for a protocol
    without a pace model (``Aggregation.pace`` None)."""
    kept_up: bool
    not_kept_up_because: str
    """The summary.json keys that list the jobs which turned kept_up false."""
    verified: bool
    retransmissions: int
    machine_busy: float
    """Largest busy share of all cores over the jobs (softirq included)."""
    updates_per_s: float
    """Updates the workers sent into the switch per second of job (retransmissions included)."""
    cpu_us_per_update: float
    """The whole machine's busy CPU per update; the next three are its parts (busy also holds steal)."""
    cpu_user_us_per_update: float
    cpu_system_us_per_update: float
    cpu_softirq_us_per_update: float
    cpu_ns_per_element: float
    """The whole machine's busy CPU per element an update carries (cpu_us_per_update / k)."""
    worker_us_per_packet: float
    """A worker's user + system CPU per packet it sent (and the result it received)."""
    worker_user_us_per_packet: float
    worker_system_us_per_packet: float
    switch_us_per_update: float
    """The switch process's user + system CPU per update it received; NaN without a process (eBPF)."""
    load_before: float
    """The machine's 1-minute load average when the probe started: other work on a shared machine."""
    measured_utc: str
    run_dir: str

    @property
    def keeps_up(self) -> bool:
        return self.kept_up and self.verified and self.share_of_bound >= KEEPS_UP_SHARE

    def describe(self) -> str:
        """One log line: the rate, the verdict and why, and how busy the machine was."""
        why = f" ({self.not_kept_up_because})" if self.not_kept_up_because else ""
        return (f"{self.target}, {self.method}, {self.workers} workers, k = {self.k}, {self.link_mbps:g} Mbit/s attempt {self.attempt}: "
                f"{100 * self.share_of_bound:.1f} % of the bound, kept_up {self.kept_up}{why}, machine {100 * self.machine_busy:.0f} % "
                f"busy (load {self.load_before:.1f} before)")


def probe_elements(method: Method, link_mbps: float, seconds: float, at_least_packets: int, k: int, workers: int) -> int:
    """A tensor of ``seconds`` of ``method``'s line-rate data at ``link_mbps`` in whole packets of k, and
    no fewer than ``at_least_packets`` packets: as many as the config's own tensor has, whose
    float32 lead round (one exponent-only packet per slot) is 1.5 % of them, so that no probe,
    whatever its k, is held further below the line-rate bound than the main job is (a
    131,072-element tensor is 4,096 packets at k = 32 but 512 at k = 256, where the lead
    round alone would cost 12.5 %)."""
    packets = math.ceil(seconds * method.bound(params.mbps_to_bps(link_mbps), workers, k) / k)
    return max(packets, at_least_packets) * k


def run_probe(method: Method, target: str, workers: int, k: int, data_path: str, link_mbps: float, elements: int,
              repetitions: int, out: Path, extra: Sequence[str] = ()) -> Path:
    """One real run of the experiment runner into ``out``; its output goes to ``out``.log.
    ``extra``: more ``--set`` overrides (a calibration names its probes' experiment)."""
    overrides = [
        f"methods=[{method.name}]", f"switch.target={target}", f"topology.workers={workers}", f"protocol.k={k}",
        f"protocol.data_path={data_path}",
        f"topology.link.bw_mbps={link_mbps:g}", f"workload.elements={elements}", f"repetitions={repetitions}", *extra,
    ]
    argv = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(CONFIG), "--out", str(out)]
    for override in overrides:
        argv += ["--set", override]
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = out.with_name(out.name + ".log")
    with log_path.open("w") as output:
        run = subprocess.Popen(argv, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            status = run.wait(timeout=PROBE_TIMEOUT_S)
        except BaseException as exc:  # interrupted or too long: the run tears its network down on SIGTERM (never SIGKILL it)
            run.terminate()
            run.wait()
            if isinstance(exc, subprocess.TimeoutExpired):
                raise RuntimeError(f"probe {target} {method.name} {workers} workers k={k} {link_mbps:g} Mbit/s took more than {PROBE_TIMEOUT_S} s "
                                   f"and was stopped; see {log_path}") from None
            raise
    if not (out / "summary.json").is_file():  # 1 (not verified) still wrote its tables
        raise RuntimeError(f"probe {target} {method.name} {workers} workers k={k} {link_mbps:g} Mbit/s failed (exit {status}); see {log_path}")
    return out


def read_probe(method: Method, run_dir: Path, attempt: int, load_before: float) -> Probe:
    """The table's row of one probe of ``method``, from its summary.json, runs.csv and fidelity.csv."""
    summary = json.loads((run_dir / "summary.json").read_text())
    runs = pd.read_csv(run_dir / "runs.csv")
    fidelity = pd.read_csv(run_dir / "fidelity.csv")
    probed = summary["methods"][method.name]
    data_path = fmt.data_path_of(summary)
    updates = runs["packets_sent"].sum()
    job_seconds = runs.groupby("repetition")["tat_s"].max().sum()
    machine = fidelity[fidelity["host"] == MACHINE]
    cores = summary["cpu_cores"]

    def machine_us(column: str) -> float:
        return float((machine[column] * machine["wall_s"]).sum() * cores * 1e6 / updates)

    switches = fidelity[fidelity["achieved_mbps"].notna() & (fidelity["host"] != MACHINE)]  # switch rows only
    workers = fidelity[fidelity["achieved_mbps"].isna() & (fidelity["host"] != MACHINE)]

    def process_us(rows: pd.DataFrame, column: str) -> float:
        return float((rows[column] * rows["wall_s"]).sum() * 1e6 / updates) if len(rows) else math.nan

    k = int(runs["k"].iloc[0])
    return Probe(
        target=summary["switch_target"], method=method.name, workers=summary["workers"], k=k,
        data_path=data_path["used"] if data_path["protocol"] == method.aggregation.name else "",
        link_mbps=summary["link_mbps"], attempt=attempt,
        elements=int(runs["elements"].iloc[0]), repetitions=int(runs["repetition"].nunique()),
        ate_per_s=round(probed["ate_per_s"]),
        share_of_bound=round(probed["ate_fraction_of_bound"], 4),
        share_of_pace=round(probed.get("ate_fraction_of_pace_bound", math.nan), 4),
        kept_up=bool(summary["kept_up"]),
        not_kept_up_because=" ".join(key for key in KEPT_UP_REASONS if summary[key]),
        verified=bool(summary["verified"]), retransmissions=int(probed["retransmissions"]),
        machine_busy=summary["max_machine_busy_fraction"],
        updates_per_s=round(updates / job_seconds),
        cpu_us_per_update=round(machine_us("cpu_busy_fraction"), 2),
        cpu_user_us_per_update=round(machine_us("cpu_user_fraction"), 2),
        cpu_system_us_per_update=round(machine_us("cpu_system_fraction"), 2),
        cpu_softirq_us_per_update=round(machine_us("cpu_softirq_fraction"), 2),
        cpu_ns_per_element=round(machine_us("cpu_busy_fraction") * 1e3 / k, 2),
        worker_us_per_packet=round(process_us(workers, "cpu_busy_fraction"), 2),
        worker_user_us_per_packet=round(process_us(workers, "cpu_user_fraction"), 2),
        worker_system_us_per_packet=round(process_us(workers, "cpu_system_fraction"), 2),
        switch_us_per_update=round(process_us(switches, "cpu_busy_fraction"), 2),
        load_before=round(load_before, 2), measured_utc=summary["started_utc"], run_dir=str(run_dir),
    )


@dataclass(frozen=True)
class ProbeSettings:
    """How long and how often each rate is probed."""

    seconds: float
    """Line-rate seconds of data per job (sizes the tensor; never below the config's)."""
    repetitions: int
    """Jobs per probe (the share is their median)."""
    attempts: int
    """Runs per rate until one keeps up."""


class Prober:
    """Probes one in-network method on one target, worker count and k: each attempt a run in
    ``runs_dir``, handed to ``on_probe`` (a table's row, a progress bar); ``on_start`` names
    the attempt about to run."""

    def __init__(self, method: Method, target: str, workers: int, k: int, data_path: str, settings: ProbeSettings, runs_dir: Path,
                 on_probe: Callable[[Probe], None], on_start: Callable[[str], None] = lambda what: None,
                 extra: Sequence[str] = ()) -> None:
        if method.aggregation is None:
            raise ValueError(f"{method.name} aggregates on no switch: a capacity probe measures an in-network method")
        self.method, self.target, self.workers, self.k, self.data_path = method, target, workers, k, data_path
        self.settings, self.runs_dir, self.on_probe, self.on_start, self.extra = settings, runs_dir, on_probe, on_start, extra
        self.probes: list[Probe] = []
        point = load_experiment(CONFIG).points[0]
        self.config_packets = math.ceil(point.workload_info.elements / int(point.protocol["k"]))

    def keeps_up(self, link_mbps: float) -> bool:
        """Up to ``settings.attempts`` runs at ``link_mbps``; True as soon as one keeps up. A
        rate given again goes on counting its attempts, each its own run."""
        done = sum(probe.link_mbps == link_mbps for probe in self.probes)
        for attempt in range(done + 1, done + self.settings.attempts + 1):
            self.on_start(f"{link_mbps:g} Mbit/s, attempt {attempt}")
            load_before = os.getloadavg()[0]
            out = self.runs_dir / f"{link_mbps:g}mbps-a{attempt}"
            elements = probe_elements(self.method, link_mbps, self.settings.seconds, self.config_packets, self.k, self.workers)
            run_probe(self.method, self.target, self.workers, self.k, self.data_path, link_mbps, elements, self.settings.repetitions,
                      out, self.extra)
            probe = read_probe(self.method, out, attempt, load_before)
            self.probes.append(probe)
            self.on_probe(probe)
            if probe.keeps_up:
                return True
        return False


def search(keeps_up: Callable[[float], bool], start: float, floor: float, ceiling: float, bisections: int) -> float | None:
    """The highest rate found to keep up: doubling (or halving) from ``start`` to bracket the
    capacity, then ``bisections`` midpoints. None when not even ``floor`` keeps up."""
    rate = start
    if keeps_up(rate):
        good, bad = rate, None
        while bad is None and rate * 2 <= ceiling:
            rate *= 2
            if keeps_up(rate):
                good = rate
            else:
                bad = rate
        if bad is None:
            return good
    else:
        good, bad = None, rate
        while good is None and rate / 2 >= floor:
            rate /= 2
            if keeps_up(rate):
                good = rate
            else:
                bad = rate
        if good is None:
            return None
    for _ in range(bisections):
        middle = float(f"{(good + bad) / 2:.3g}")
        if middle in (good, bad):
            break
        if keeps_up(middle):
            good = middle
        else:
            bad = middle
    return good


def most_probes(start: float, floor: float, ceiling: float, bisections: int) -> int:
    """The most rates ``search`` tries from ``start``: the longer of the doubling and the
    halving walks, the rate that fails, and the bisections (a bar's total)."""
    up = math.floor(math.log2(ceiling / start)) if ceiling >= start else 0
    down = math.floor(math.log2(start / floor)) if start >= floor else 0
    return 1 + max(up, down) + bisections
