"""Emulation capacity: the fastest links on which a switch target lets the network set an in-network method's pace.

Every in-network method of the registry (methods.REGISTRY's methods with an aggregation
protocol; ``--methods`` picks some) is measured on every switch target this machine runs
that has a data plane for its protocol (``--target`` picks some), one after another. A probe
is experiments/capacity.py's: one real run of ``run_experiment.py`` on configs/8workers.yaml
with the method only, the link rate, worker count, elements per packet (``--k``) and switch
target set, and a tensor of ``--seconds`` of line-rate data; a rate keeps up when the method
reaches 95 % of its line-rate bound with ``kept_up`` true, in any of ``--attempts`` runs
(that module says why).

Search (default): double the rate from ``--start`` (the target's shipped rate for the k)
until it no longer keeps up (or halve until it does), then bisect between the last rate that
kept up and the first that did not. ``--rates`` measures the given rates instead. Every
attempt is a row of the table:

    .venv/bin/python benchmarks/emulation_capacity.py                             # search: every method, every target, 8 workers
    .venv/bin/python benchmarks/emulation_capacity.py --target ebpf --methods atp --k 32 --workers 16
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
import logging
import math
import os
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from tqdm import tqdm  # noqa: E402

import methods  # noqa: E402
from experiments.capacity import CONFIG, KEEPS_UP_SHARE, Probe, Prober, ProbeSettings, search  # noqa: E402
from experiments.config import load_experiment  # noqa: E402
from experiments.results import utc_stamp  # noqa: E402
from methods import Method  # noqa: E402
from switches.targets import REGISTRY  # noqa: E402

log = logging.getLogger("emulation_capacity")

OUTPUT = REPO_ROOT / "results" / "benchmarks" / "emulation_capacity.csv"
RUNS_DIR = REPO_ROOT / "results" / "benchmarks" / "emulation_capacity"
FIRST_GUESS_MBPS = 2.5
"""Where a search starts on a target that ships no rate for the k."""
IN_NETWORK: tuple[Method, ...] = tuple(method for method in methods.REGISTRY if method.aggregation is not None)
"""The methods measured: every in-network one the registry has, in figure order."""


def available_targets() -> list[str]:
    """The switch targets this machine runs (for a process that is not root, also those only root can tell)."""
    return [name for name, target in REGISTRY.items() if not (problems := target.missing()) or target.undecided(problems)]


def pairs(targets: list[str], names: list[str] | None, k: int) -> tuple[list[tuple[str, Method]], list[str]]:
    """(target, method) to measure, target by target, and why the others of ``targets`` x
    methods are left out. Methods asked for by name (``names``) must run on every target
    asked for; by default each target measures the in-network methods its data planes run."""
    chosen = IN_NETWORK if names is None else tuple(methods.by_name(name) for name in names)
    measured, left_out = [], []
    for target_name in targets:
        target = REGISTRY[target_name]
        for method in chosen:
            assert method.aggregation is not None
            protocol = method.aggregation
            why = (f"{target_name} has no data plane for {protocol.name}" if protocol.name not in target.protocols
                   else f"{target_name} builds no program for k = {k}" if not target.builds(k)
                   else f"{protocol.name} carries no k = {k}" if k not in protocol.k_choices else None)
            if why is None:
                measured.append((target_name, method))
            elif names is not None:
                raise ValueError(f"{method.name} on {target_name}: {why}")
            else:
                left_out.append(f"{method.name} on {target_name}: {why}")
    return measured, left_out


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
    header = ("| target | method | workers | k | data path | link Mbit/s | attempt | ATE/s | of bound | of pace | kept_up | machine busy | updates/s "
              "| CPU µs/update (user + sys + softirq) | CPU ns/element | worker µs/packet (user + sys) | switch process µs/update |")
    lines = [header, "|" + "---|" * header.count(" | ") + "---|"]
    for p in probes:
        why = "" if p.kept_up else f" ({p.not_kept_up_because})"
        switch = "" if math.isnan(p.switch_us_per_update) else f"{p.switch_us_per_update:.1f}"
        lines.append(
            f"| {p.target} | {p.method} | {p.workers} | {p.k} | {p.data_path or '-'} | {p.link_mbps:g} | {p.attempt} | {p.ate_per_s:,.0f} | {p.share_of_bound:.1%} "
            f"| {'-' if math.isnan(p.share_of_pace) else f'{p.share_of_pace:.1%}'} "
            f"| {str(p.kept_up).lower()}{why} | {p.machine_busy:.0%} | {p.updates_per_s:,.0f} "
            f"| {p.cpu_us_per_update:.1f} ({p.cpu_user_us_per_update:.1f} + {p.cpu_system_us_per_update:.1f} + "
            f"{p.cpu_softirq_us_per_update:.1f}) | {p.cpu_ns_per_element:.0f} | {p.worker_us_per_packet:.1f} ({p.worker_user_us_per_packet:.1f} + "
            f"{p.worker_system_us_per_packet:.1f}) | {switch} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", nargs="+", choices=list(REGISTRY), help="switch targets (default: every one this machine runs)")
    parser.add_argument("--methods", nargs="+", choices=[method.name for method in IN_NETWORK],
                        help="in-network methods (default: every one a target runs)")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--k", type=int, choices=methods.k_choices(), help="elements per packet (default: the config's)")
    parser.add_argument("--data-path", choices=("auto", "native", "python"), default="auto",
                        help="the worker's loop of a protocol that has two (protocol.data_path; default auto: native where it builds)")
    parser.add_argument("--rates", type=float, nargs="+", metavar="MBPS", help="measure these link rates instead of searching")
    parser.add_argument("--start", type=float, help=f"search: first rate (Mbit/s; default the target's shipped rate, else {FIRST_GUESS_MBPS:g})")
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
    if min(args.rates or [args.start or FIRST_GUESS_MBPS]) <= 0 or args.seconds <= 0 or args.repetitions < 1 or args.attempts < 1:
        parser.error("rates, --seconds, --repetitions and --attempts must be positive")
    if os.geteuid() != 0:
        parser.error("the probes start Mininet: run as root")
    if (problem := output_problem(args.output)) is not None:
        parser.error(problem)
    if args.k is None:
        args.k = int(load_experiment(CONFIG).points[0].protocol["k"])
    targets = args.target or available_targets()
    if not targets:
        parser.error("no switch target runs on this machine (run_experiment.py --switch-info says why)")
    try:
        measured, left_out = pairs(targets, args.methods, args.k)
    except ValueError as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for why in left_out:
        log.info("left out: %s", why)
    started = time.monotonic()
    settings = ProbeSettings(seconds=args.seconds, repetitions=args.repetitions, attempts=args.attempts)
    runs_dir = args.runs_dir / f"{utc_stamp()}-{args.workers}w-k{args.k}"
    probes: list[Probe] = []
    found: list[str] = []
    for target, method in measured:
        start = args.start or REGISTRY[target].link_mbps(args.k) or FIRST_GUESS_MBPS
        total = len(args.rates) * args.attempts if args.rates else None
        with tqdm(total=total, desc=f"capacity {target} {method.name} {args.workers}w", unit="probe", file=sys.stderr,
                  disable=None) as bar:
            def tabled(probe: Probe) -> None:
                append_row(args.output, probe)
                probes.append(probe)
                bar.update(1)
                log.info("%s", probe.describe())

            prober = Prober(method, target, args.workers, args.k, args.data_path, settings, runs_dir / f"{target}-{method.name}", tabled,
                            bar.set_postfix_str)
            if args.rates:
                for rate in args.rates:
                    prober.keeps_up(rate)
            else:
                capacity = search(prober.keeps_up, start, args.floor, args.ceiling, args.bisections)
                reached = "none of the rates tried" if capacity is None else f"{capacity:g} Mbit/s"
                found.append(f"{target}, {method.label}, {args.workers} workers, k = {args.k}: keeps up (>= {KEEPS_UP_SHARE:.0%} of its "
                             f"bound, kept_up) at up to {reached} ({len(prober.probes)} probes from {start:g} Mbit/s)")
    print(format_table(probes))
    for line in found:
        print(line)
    print(f"{len(probes)} probes in {time.monotonic() - started:.0f} s; rows appended to {args.output}; probes' results in {runs_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
