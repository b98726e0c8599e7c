"""Emulation capacity: the fastest links on which a switch target lets the network set the pace.

A probe is one real run of ``run_experiment.py`` (Mininet, the target, the workers, the
results tables): configs/8workers.yaml with SwitchML only, the link rate, worker count,
elements per packet (``--k``) and switch target overridden with ``--set``, and a tensor sized to ``--seconds`` of line-rate
data at the probed rate (so jobs are about equally long whatever the rate), never smaller
than the config's own (131,072 elements, whose float32 lead round is 1.5 % of it). A
rate keeps up when SwitchML's median ATE/s reaches KEEPS_UP_SHARE of its line-rate bound
and the run's ``kept_up`` is true (docs/results-format.md: no saturated process or machine,
no lost frame, no job paced by the emulator). A machine shared with other work can only
make a probe slower, never faster, so a rate is tried up to ``--attempts`` times and keeps
up if any attempt does.

Search (default): double the rate from ``--start`` until it no longer keeps up (or halve
until it does), then bisect between the last rate that kept up and the first that did not.
``--rates`` measures the given rates instead. Every attempt is a row of the table:

    .venv/bin/python benchmarks/emulation_capacity.py --target ebpf               # search, 8 workers, the config's k
    .venv/bin/python benchmarks/emulation_capacity.py --target ebpf --k 32 --workers 16
    .venv/bin/python benchmarks/emulation_capacity.py --target embedded --rates 2.5 5 10

Run as root. Rows are appended to results/benchmarks/emulation_capacity.csv (``--output``);
each probe's results folder is kept under results/benchmarks/emulation_capacity/ with its
log. CPU per update is the whole machine's (every worker, the switch, the kernel's veths,
htb and, for the eBPF switch, the switch itself, which runs as softirq) over the updates the
workers sent, and per element the same over the k elements an update carries; per packet of
a worker and per update of a switch process use those processes' own CPU time (the eBPF
switch has no process).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

import pandas as pd  # noqa: E402
from tqdm import tqdm  # noqa: E402

from analysis.models import switchml_line_rate_ate  # noqa: E402
from experiments.config import load_experiment  # noqa: E402
from experiments.results import utc_stamp  # noqa: E402
from protocol import results_format as fmt  # noqa: E402
from protocol.results_format import MACHINE  # noqa: E402
from protocol import params  # noqa: E402
from switches.targets import REGISTRY  # noqa: E402

log = logging.getLogger("emulation_capacity")

CONFIG = REPO_ROOT / "configs" / "8workers.yaml"
OUTPUT = REPO_ROOT / "results" / "benchmarks" / "emulation_capacity.csv"
RUNS_DIR = REPO_ROOT / "results" / "benchmarks" / "emulation_capacity"
KEEPS_UP_SHARE = 0.95
"""A rate keeps up when SwitchML reaches this share of its line-rate bound (and kept_up holds)."""
KEPT_UP_REASONS = ("saturated_processes", "saturated_jobs", "switch_lost_frames", "paced_by_emulator")
"""summary.json's lists of jobs that turned kept_up false."""
PROBE_TIMEOUT_S = 1800
"""A probe waits for the network lock (other runs on the machine) and then runs its jobs."""


@dataclass(frozen=True)
class Probe:
    """One attempt at one link rate: a run's summary and CPU, reduced to the table's row."""

    target: str
    workers: int
    k: int
    data_path: str
    """The in-network worker's loop that ran (native or python: summary.json's data_path)."""
    link_mbps: float
    attempt: int
    elements: int
    repetitions: int
    ate_per_s: float
    """SwitchML's median aggregated tensor elements per second."""
    share_of_bound: float
    """Median ATE/s over SwitchML's line-rate bound."""
    share_of_pace: float
    """Median ATE/s over the pace the network allows (experiments/pace.py)."""
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


def probe_elements(link_mbps: float, seconds: float, at_least_packets: int, k: int) -> int:
    """A tensor of ``seconds`` of line-rate data at ``link_mbps`` in whole packets of k, and
    no fewer than ``at_least_packets`` packets: as many as the config's own tensor has, whose
    float32 lead round (one exponent-only packet per slot) is 1.5 % of them, so that no probe,
    whatever its k, is held further below the line-rate bound than the main job is (a
    131,072-element tensor is 4,096 packets at k = 32 but 512 at k = 256, where the lead
    round alone would cost 12.5 %)."""
    packets = math.ceil(seconds * switchml_line_rate_ate(params.mbps_to_bps(link_mbps), k) / k)
    return max(packets, at_least_packets) * k


def run_probe(target: str, workers: int, k: int, data_path: str, link_mbps: float, elements: int, repetitions: int,
              out: Path) -> Path:
    """One real run of the experiment runner into ``out``; its output goes to ``out``.log."""
    overrides = [
        "methods=[switchml]", f"switch.target={target}", f"topology.workers={workers}", f"protocol.k={k}",
        f"protocol.data_path={data_path}",
        f"topology.link.bw_mbps={link_mbps:g}", f"workload.elements={elements}", f"repetitions={repetitions}",
    ]
    argv = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(CONFIG), "--out", str(out)]
    for override in overrides:
        argv += ["--set", override]
    out.parent.mkdir(parents=True, exist_ok=True)
    log_path = out.with_name(out.name + ".log")
    with log_path.open("w") as output:
        done = subprocess.run(argv, stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=PROBE_TIMEOUT_S)
    if not (out / "summary.json").is_file():  # 1 (not verified) still wrote its tables
        raise RuntimeError(f"probe {target} {workers} workers k={k} {link_mbps:g} Mbit/s failed (exit {done.returncode}); see {log_path}")
    return out


def read_probe(run_dir: Path, attempt: int, load_before: float) -> Probe:
    """The table's row of one probe, from its summary.json, runs.csv and fidelity.csv."""
    summary = json.loads((run_dir / "summary.json").read_text())
    runs = pd.read_csv(run_dir / "runs.csv")
    fidelity = pd.read_csv(run_dir / "fidelity.csv")
    switchml = summary["methods"]["switchml"]
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
        target=summary["switch_target"], workers=summary["workers"], k=k, data_path=fmt.data_path_of(summary)["used"],
        link_mbps=summary["link_mbps"], attempt=attempt,
        elements=int(runs["elements"].iloc[0]), repetitions=int(runs["repetition"].nunique()),
        ate_per_s=round(switchml["ate_per_s"]),
        share_of_bound=round(switchml["ate_fraction_of_bound"], 4),
        share_of_pace=round(switchml.get("ate_fraction_of_pace_bound", math.nan), 4),
        kept_up=bool(summary["kept_up"]),
        not_kept_up_because=" ".join(key for key in KEPT_UP_REASONS if summary[key]),
        verified=bool(summary["verified"]), retransmissions=int(switchml["retransmissions"]),
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


class Prober:
    """Runs probes of one target and worker count, appends each attempt to the table."""

    def __init__(self, args: argparse.Namespace, bar: tqdm) -> None:
        self.args = args
        self.bar = bar
        self.runs_dir = args.runs_dir / f"{utc_stamp()}-{args.target}-{args.workers}w-k{args.k}"
        self.probes: list[Probe] = []
        point = load_experiment(CONFIG).points[0]
        self.config_packets = math.ceil(point.workload_info.elements / int(point.protocol["k"]))

    def keeps_up(self, link_mbps: float) -> bool:
        """Up to ``--attempts`` runs at ``link_mbps``; True as soon as one keeps up. A rate
        given again (``--rates 30 30``) goes on counting its attempts, each its own run."""
        done = sum(probe.link_mbps == link_mbps for probe in self.probes)
        for attempt in range(done + 1, done + self.args.attempts + 1):
            self.bar.set_postfix_str(f"{link_mbps:g} Mbit/s, attempt {attempt}")
            load_before = os.getloadavg()[0]
            out = self.runs_dir / f"{link_mbps:g}mbps-a{attempt}"
            elements = probe_elements(link_mbps, self.args.seconds, self.config_packets, self.args.k)
            run_probe(self.args.target, self.args.workers, self.args.k, self.args.data_path, link_mbps, elements,
                      self.args.repetitions, out)
            probe = read_probe(out, attempt, load_before)
            self.probes.append(probe)
            append_row(self.args.output, probe)
            self.bar.update(1)
            log.info("k = %d, %g Mbit/s attempt %d: %.1f %% of the bound, kept_up %s%s, machine %.0f %% busy (load %.1f before)",
                     self.args.k, link_mbps, attempt, 100 * probe.share_of_bound, probe.kept_up,
                     f" ({probe.not_kept_up_because})" if probe.not_kept_up_because else "", 100 * probe.machine_busy, load_before)
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


def output_problem(path: Path) -> str | None:
    """Why rows cannot be appended to ``path`` (checked before the first probe runs)."""
    if not path.exists():
        return None
    with path.open(newline="") as f:
        header = next(csv.reader(f), [])
    if header != [field.name for field in fields(Probe)]:
        return f"{path} has other columns than this benchmark writes (an older version's): move it aside or pass --output"
    return None


def append_row(path: Path, probe: Probe) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    columns = [field.name for field in fields(Probe)]
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        if new:
            writer.writeheader()
        writer.writerow(asdict(probe))


def format_table(probes: list[Probe]) -> str:
    """The rows of this invocation as a markdown table (the CSV has every column)."""
    header = ("| target | workers | k | data path | link Mbit/s | attempt | ATE/s | of bound | of pace | kept_up | machine busy | updates/s "
              "| CPU µs/update (user + sys + softirq) | CPU ns/element | worker µs/packet (user + sys) | switch process µs/update |")
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for p in probes:
        why = "" if p.kept_up else f" ({p.not_kept_up_because})"
        switch = "" if math.isnan(p.switch_us_per_update) else f"{p.switch_us_per_update:.1f}"
        lines.append(
            f"| {p.target} | {p.workers} | {p.k} | {p.data_path} | {p.link_mbps:g} | {p.attempt} | {p.ate_per_s:,.0f} | {p.share_of_bound:.1%} "
            f"| {p.share_of_pace:.1%} "
            f"| {str(p.kept_up).lower()}{why} | {p.machine_busy:.0%} | {p.updates_per_s:,.0f} "
            f"| {p.cpu_us_per_update:.1f} ({p.cpu_user_us_per_update:.1f} + {p.cpu_system_us_per_update:.1f} + "
            f"{p.cpu_softirq_us_per_update:.1f}) | {p.cpu_ns_per_element:.0f} | {p.worker_us_per_packet:.1f} ({p.worker_user_us_per_packet:.1f} + "
            f"{p.worker_system_us_per_packet:.1f}) | {switch} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=list(REGISTRY), required=True)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--k", type=int, choices=params.K_CHOICES, help="elements per packet (default: the config's)")
    parser.add_argument("--data-path", choices=("auto", "native", "python"), default="auto",
                        help="the SwitchML worker's loop (protocol.data_path; default auto: native where it builds)")
    parser.add_argument("--rates", type=float, nargs="+", metavar="MBPS", help="measure these link rates instead of searching")
    parser.add_argument("--start", type=float, default=2.5, help="search: first rate (Mbit/s)")
    parser.add_argument("--floor", type=float, default=0.25, help="search: lowest rate tried")
    parser.add_argument("--ceiling", type=float, default=160.0, help="search: highest rate tried")
    parser.add_argument("--bisections", type=int, default=2, help="search: midpoints tried after bracketing")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="line-rate seconds of data per job (sizes the tensor; never below the config's)")
    parser.add_argument("--repetitions", type=int, default=2, help="jobs per probe (the share is their median)")
    parser.add_argument("--attempts", type=int, help="runs per rate until one keeps up (default: 2 searching, 1 with --rates)")
    parser.add_argument("--output", type=Path, default=OUTPUT, help="CSV the rows are appended to")
    parser.add_argument("--runs-dir", type=Path, default=RUNS_DIR, help="where each probe's results folder is kept")
    args = parser.parse_args(argv)
    if args.attempts is None:
        args.attempts = 1 if args.rates else 2
    if min(args.rates or [args.start]) <= 0 or args.seconds <= 0 or args.repetitions < 1 or args.attempts < 1:
        parser.error("rates, --seconds, --repetitions and --attempts must be positive")
    if os.geteuid() != 0:
        parser.error("the probes start Mininet: run as root")
    if (problem := output_problem(args.output)) is not None:
        parser.error(problem)
    if args.k is None:
        args.k = int(load_experiment(CONFIG).points[0].protocol["k"])
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    started = time.monotonic()
    total = len(args.rates) * args.attempts if args.rates else None
    with tqdm(total=total, desc=f"capacity {args.target} {args.workers}w", unit="probe", file=sys.stderr, disable=None) as bar:
        prober = Prober(args, bar)
        if args.rates:
            for rate in args.rates:
                prober.keeps_up(rate)
            capacity = None
        else:
            capacity = search(prober.keeps_up, args.start, args.floor, args.ceiling, args.bisections)
    print(format_table(prober.probes))
    if not args.rates:
        found = "none of the rates tried" if capacity is None else f"{capacity:g} Mbit/s"
        print(f"{args.target}, {args.workers} workers, k = {args.k}: SwitchML keeps up (>= {KEEPS_UP_SHARE:.0%} of its bound, kept_up) "
              f"at up to {found}; {len(prober.probes)} probes in {time.monotonic() - started:.0f} s")
    print(f"rows appended to {args.output}; probes' results in {prober.runs_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
