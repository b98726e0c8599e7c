"""Simulated against emulated TAT of the in-network methods (SwitchML, ATP), point by point,
for emulated runs made already.

For each emulated run folder given, its own config.yaml (the resolved config it ran with:
link rates, delays, loss, pools) is run again with ``run_experiment.py --simulate``, its
in-network methods only (the host-based baselines are line-rate models on that clock), on
the emulated run's own target (its data-plane contract simulated, docs/simulation.md), with the loss where the emulated run
had it (network.json: the switches' drop simulator, or the links), its links given the
emulator's htb bucket (``--link-burst-bytes``, default network/shaping.py's HTB_CBURST_BYTES;
0 is the wire's model): the comparison is with the emulator's network, whose links let a
frame after an idle spell cross at once (simulation/link.py). Each point's median
TAT per method of both runs goes to results/benchmarks/simulation_validation.csv
(``--output``) with their ratio, and a Markdown table is printed (benchmarks/README.md,
"Simulated against emulated"). The simulated runs' folders are kept under
results/benchmarks/simulation_validation/<UTC time>/. No tolerance is asserted here: the table says
where the two differ, and the README says why.

A lossy job's TAT is set by a few dozen timeouts and varies by tens of per cent between
repetitions, so three emulated and three simulated repetitions cannot tell a model that is
off from a draw that is. ``--seeds N`` runs each config N times on the simulated clock
(``simulation.seed`` 1..N, every seed drawing other losses) and compares the emulated
repetitions' mean with the distribution of all those simulated repetitions: their mean,
standard deviation and 5th-95th percentiles, and how many standard errors of a mean of as
many repetitions as the emulated run had the two means are apart (rows in
simulation_validation_seeds.csv beside ``--output``).

``--rank-starts measured`` starts each point's simulated ranks as the emulated run's started
(benchmarks/rank_starts.py measures a skew and a jitter per point and method from its per-rank
TATs), each point and method then simulated alone with its own; ``--set KEY=VALUE`` passes
further overrides (a host's or the switch's time per packet: ``simulation.switch_packet_cost_us``).

    .venv/bin/python benchmarks/simulation_validation.py results/8workers/2026* /work/meas/fig/tat_vs_size
    .venv/bin/python benchmarks/simulation_validation.py --seeds 30 /work/meas/fig/tat_inflation_vs_loss
    .venv/bin/python benchmarks/simulation_validation.py --rank-starts measured --seeds 5 RUN_DIR
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import logging
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from benchmarks.rank_starts import MeasuredStarts, measure as measure_starts  # noqa: E402
from experiments.results import utc_stamp  # noqa: E402
import methods  # noqa: E402
from network.shaping import HTB_CBURST_BYTES  # noqa: E402
from protocol import results_format as fmt  # noqa: E402
from protocol.results_format import CONFIG_FILE, SUMMARY_FILE  # noqa: E402

log = logging.getLogger("simulation_validation")

COLUMNS = ("config", "emulated_run", "method", "link_burst_bytes", "point", "sweep_param", "sweep_value", "emulated_target", "emulated_data_path", "link_mbps",
           "loss_mechanism", "emulated_tat_s", "simulated_tat_s", "simulated_over_emulated", "emulated_tat_s_min", "emulated_tat_s_max",
           "simulated_tat_s_min", "simulated_tat_s_max", "ranges_overlap", "emulated_retransmissions",
           "simulated_retransmissions", "simulated_verified")
SEED_COLUMNS = ("config", "emulated_run", "method", "link_burst_bytes", "point", "sweep_param", "sweep_value", "loss_mechanism", "seeds", "emulated_repetitions",
                "emulated_tat_s_mean", "emulated_tat_s_min", "emulated_tat_s_max", "simulated_repetitions", "simulated_tat_s_mean",
                "simulated_tat_s_sd", "simulated_tat_s_p5", "simulated_tat_s_p95", "emulated_over_simulated_mean", "within_5_percent",
                "inside_p5_p95", "standard_errors_apart", "emulated_retransmissions_mean", "simulated_retransmissions_mean",
                "simulated_verified")
DROP_SIMULATOR = "switch_drop_simulator"
VALIDATION_SHARE = 0.05


def in_network_methods(run: Path) -> list[str]:
    """``run``'s methods that the simulated clock runs as the emulator does: in-network
    aggregation with a worker core (methods/aggregation.py)."""
    names = yaml.safe_load((run / CONFIG_FILE).read_text())["methods"]
    chosen = [name for name in names if (aggregation := methods.by_name(name).aggregation) is not None and aggregation.simulated]
    if not chosen:
        raise ValueError(f"{run}: no in-network method the simulated clock runs among {names}")
    return chosen


def simulate(run: Path, out: Path, burst_bytes: float, seed: int | None = None, starts: dict[tuple[int, str], MeasuredStarts] | None = None,
             extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """``run``'s config on the simulated clock into ``out``, each link with a token bucket of
    ``burst_bytes`` (and with ``simulation.seed``, if given, and the ``extra`` overrides); its
    summary's points. With ``starts``, each point and method runs alone with the ranks' starts
    measured there (``run_points_apart``)."""
    network = json.loads((run / "network.json").read_text())
    # the run's own target (config.yaml): its rate and contract
    overrides = [f"simulation.link_burst_bytes={burst_bytes:g}", *extra]
    if any(point.get("loss_mechanism") == DROP_SIMULATOR for point in network.values()):
        overrides.append("loss_mechanism=switch")
    if seed is not None:
        overrides.append(f"simulation.seed={seed}")
    if starts is None:
        run_simulated(run, out, [f"methods=[{','.join(in_network_methods(run))}]", *overrides])
        return json.loads((out / SUMMARY_FILE).read_text())["points"]
    points: dict[int, dict[str, Any]] = {}
    for (index, method), outs in run_points_apart(run, out, {key: [*overrides, *measured.overrides()] for key, measured in starts.items()}).items():
        [point] = json.loads((outs / SUMMARY_FILE).read_text())["points"]
        points.setdefault(index, {**point, "point": index, "methods": {}})["methods"][method] = point["methods"][method]
    return [points[index] for index in sorted(points)]


def run_points_apart(run: Path, out: Path, overrides: dict[tuple[int, str], list[str]]) -> dict[tuple[int, str], Path]:
    """Each (point, method) of ``run`` simulated alone, with its own ``overrides``: its config
    with the sweep cut to that point's value and only that method, into a folder of ``out``
    each; the folders. Host-timing models measured per point (benchmarks/rank_starts.py)
    differ from point to point and method to method, and one run takes one value of each."""
    config = yaml.safe_load((run / CONFIG_FILE).read_text())
    outs = {}
    for (index, method), extra in overrides.items():
        one = {**config, "methods": [method]}
        if config.get("sweep"):
            one["sweep"] = {**config["sweep"], "values": [config["sweep"]["values"][index]]}
        elif index:
            raise ValueError(f"{run}: point {index} but no sweep in its config")
        outs[index, method] = out / f"point{index}-{method}"
        outs[index, method].mkdir(parents=True)
        (outs[index, method] / "simulated-config.yaml").write_text(yaml.safe_dump(one, sort_keys=False))
        run_simulated(run, outs[index, method] / "run", extra, outs[index, method] / "simulated-config.yaml")
        outs[index, method] = outs[index, method] / "run"
    return outs


def run_simulated(run: Path, out: Path, overrides: list[str], config: Path | None = None) -> None:
    """``run``'s resolved config (config.yaml, or ``config`` made from it) with ``overrides``
    (KEY=VALUE) through ``run_experiment.py --simulate`` into ``out``; RuntimeError with its
    last line if it fails (exit 1, a result that did not verify, is the comparison's to report)."""
    config = (config or run / CONFIG_FILE).resolve()
    argv = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(config), "--simulate", "--out", str(out.resolve())]
    for override in overrides:
        argv += ["--set", override]
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=REPO_ROOT)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{run}: --simulate failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")


def compare(run: Path, out_root: Path, burst_bytes: float, measured_starts: bool = False, extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    emulated = json.loads((run / SUMMARY_FILE).read_text())
    simulated = simulate(run, out_root / f"{emulated['config']}-{run.name}", burst_bytes, starts=measure_starts(run) if measured_starts else None,
                         extra=extra)
    network = json.loads((run / "network.json").read_text())
    rows = []
    for (theirs, ours), method in itertools.product(zip(emulated["points"], simulated), in_network_methods(run)):
        e, s = theirs["methods"].get(method), ours["methods"].get(method)
        if e is None or s is None:
            continue
        value = theirs["sweep_value"]
        rows.append({
            "config": emulated["config"], "emulated_run": str(run), "method": method, "link_burst_bytes": burst_bytes,
            "point": theirs["point"], "sweep_param": theirs["sweep_param"] or "",
            "sweep_value": "" if value is None else (json.dumps(value) if isinstance(value, dict) else value),
            "emulated_target": emulated["switch_target"], "emulated_data_path": fmt.data_path_of(theirs) or "",
            "link_mbps": emulated["link_mbps"], "loss_mechanism": network.get(str(theirs["point"]), {}).get("loss_mechanism", ""),
            "emulated_tat_s": e["tat_s"], "simulated_tat_s": s["tat_s"], "simulated_over_emulated": round(s["tat_s"] / e["tat_s"], 4),
            "emulated_tat_s_min": e["tat_s_min"], "emulated_tat_s_max": e["tat_s_max"], "simulated_tat_s_min": s["tat_s_min"],
            "simulated_tat_s_max": s["tat_s_max"], "ranges_overlap": s["tat_s_min"] <= e["tat_s_max"] and e["tat_s_min"] <= s["tat_s_max"],
            "emulated_retransmissions": e["retransmissions"], "simulated_retransmissions": s["retransmissions"],
            "simulated_verified": s["verified"],
        })
    return rows


def method_jobs(run: Path, method: str) -> pd.DataFrame:
    """Per point and repetition of ``run``'s jobs of ``method``: the TAT (slowest rank), the
    retransmissions (all ranks) and whether every rank verified."""
    runs = pd.read_csv(run / "runs.csv")
    runs = runs[runs["method"] == method]
    return runs.groupby(["point", "repetition"], as_index=False).agg(tat_s=("tat_s", "max"), retransmissions=("retransmissions", "sum"),
                                                                      verified=("verified", "all"))


def simulated_jobs(out: Path, method: str, starts: dict[tuple[int, str], MeasuredStarts] | None) -> pd.DataFrame:
    """``method_jobs`` of a simulation's folder ``out`` (``simulate``'s), its points each simulated alone with ``starts``."""
    if starts is None:
        return method_jobs(out, method)
    return pd.concat([method_jobs(out / f"point{index}-{method}" / "run", method).assign(point=index) for index, m in starts if m == method])


def compare_seeds(run: Path, out_root: Path, seeds: int, burst_bytes: float, measured_starts: bool = False,
                  extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """``run``'s emulated repetitions against its config simulated with ``seeds`` seeds, per point and method."""
    emulated = json.loads((run / SUMMARY_FILE).read_text())
    network = json.loads((run / "network.json").read_text())
    starts = measure_starts(run) if measured_starts else None
    outs = []
    for seed in range(1, seeds + 1):
        outs.append(out_root / f"{emulated['config']}-{run.name}-seed{seed}")
        simulate(run, outs[-1], burst_bytes, seed, starts, extra)
    rows = []
    for method in in_network_methods(run):
        simulated = pd.concat([simulated_jobs(out, method, starts) for out in outs])
        theirs = method_jobs(run, method)
        rows += seed_rows(emulated, network, run, method, theirs, simulated, seeds, burst_bytes)
    return rows


def seed_rows(emulated: dict[str, Any], network: dict[str, Any], run: Path, method: str, theirs: pd.DataFrame, simulated: pd.DataFrame,
              seeds: int, burst_bytes: float) -> list[dict[str, Any]]:
    """One row per point of ``method``'s emulated jobs (``theirs``) against its simulated ones over every seed."""
    rows = []
    for point in emulated["points"]:
        e = theirs[theirs["point"] == point["point"]]
        s = simulated[simulated["point"] == point["point"]]
        if e.empty:
            continue
        e_mean, s_mean, s_sd = e["tat_s"].mean(), s["tat_s"].mean(), statistics.stdev(s["tat_s"]) if len(s) > 1 else 0.0
        p5, p95 = np.percentile(s["tat_s"], [5, 95])
        value = point["sweep_value"]
        rows.append({
            "config": emulated["config"], "emulated_run": str(run), "method": method, "link_burst_bytes": burst_bytes,
            "point": point["point"], "sweep_param": point["sweep_param"] or "",
            "sweep_value": "" if value is None else (json.dumps(value) if isinstance(value, dict) else value),
            "loss_mechanism": network.get(str(point["point"]), {}).get("loss_mechanism", ""), "seeds": seeds,
            "emulated_repetitions": len(e), "emulated_tat_s_mean": e_mean, "emulated_tat_s_min": e["tat_s"].min(),
            "emulated_tat_s_max": e["tat_s"].max(), "simulated_repetitions": len(s), "simulated_tat_s_mean": s_mean,
            "simulated_tat_s_sd": s_sd, "simulated_tat_s_p5": p5, "simulated_tat_s_p95": p95,
            "emulated_over_simulated_mean": round(e_mean / s_mean, 4),
            "within_5_percent": abs(e_mean / s_mean - 1) <= VALIDATION_SHARE, "inside_p5_p95": bool(p5 <= e_mean <= p95),
            "standard_errors_apart": round((e_mean - s_mean) / (s_sd / len(e) ** 0.5), 2) if s_sd > 1e-9 * s_mean else "",
            "emulated_retransmissions_mean": e["retransmissions"].mean(), "simulated_retransmissions_mean": s["retransmissions"].mean(),
            "simulated_verified": bool(s["verified"].all()),
        })
    return rows


def markdown_seeds(rows: list[dict[str, Any]]) -> str:
    lines = ["| config | method | point | emulated mean TAT s (n, min-max) | simulated mean TAT s (n) | sd | p5-p95 | emu / sim mean | "
             "within 5 % | inside p5-p95 | SE apart | retx emu / sim (mean) |",
             "|---|---|---|---:|---:|---:|---:|---:|---|---|---:|---:|"]
    for r in rows:
        point = f"{r['sweep_param']} = {r['sweep_value']}" if r["sweep_param"] else str(r["point"])
        apart = "" if r["standard_errors_apart"] == "" else f"{r['standard_errors_apart']:+.2f}"
        lines.append(f"| {r['config']} | {r['method']} | {point[:60]} | {r['emulated_tat_s_mean']:.4g} ({r['emulated_repetitions']}, "
                     f"{r['emulated_tat_s_min']:.4g}-{r['emulated_tat_s_max']:.4g}) | {r['simulated_tat_s_mean']:.4g} "
                     f"({r['simulated_repetitions']}) | {r['simulated_tat_s_sd']:.3g} | {r['simulated_tat_s_p5']:.4g}-"
                     f"{r['simulated_tat_s_p95']:.4g} | {r['emulated_over_simulated_mean']:.3f} | {'yes' if r['within_5_percent'] else 'no'} | "
                     f"{'yes' if r['inside_p5_p95'] else 'no'} | {apart} | "
                     f"{r['emulated_retransmissions_mean']:.0f} / {r['simulated_retransmissions_mean']:.0f} |")
    return "\n".join(lines)


def write_csv(path: Path, columns: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    log.info("rows in %s", path)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| config | method | point | emulated (target, loop) | emulated TAT s (min-max) | simulated TAT s (min-max) | sim / emu | retx emu / sim |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        point = f"{r['sweep_param']} = {r['sweep_value']}" if r["sweep_param"] else str(r["point"])
        lines.append(f"| {r['config']} | {r['method']} | {point[:60]} | {r['emulated_target']}, {r['emulated_data_path']}, {r['link_mbps']:g} Mbit/s | "
                     f"{r['emulated_tat_s']:.4g} ({r['emulated_tat_s_min']:.4g}-{r['emulated_tat_s_max']:.4g}) | "
                     f"{r['simulated_tat_s']:.4g} ({r['simulated_tat_s_min']:.4g}-{r['simulated_tat_s_max']:.4g}) | "
                     f"{r['simulated_over_emulated']:.3f} | "
                     f"{r['emulated_retransmissions']} / {r['simulated_retransmissions']} |")
    return "\n".join(lines)


def add_link_burst(parser: argparse.ArgumentParser) -> None:
    """``--link-burst-bytes``, which both validations (and shared_switch_validation.py) take:
    the simulated links' htb bucket, the emulator's by default."""

    def bytes_at_least_0(text: str) -> float:
        value = float(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
        return value

    parser.add_argument("--link-burst-bytes", type=bytes_at_least_0, default=HTB_CBURST_BYTES,
                        help="each simulated link's htb bucket (default the emulator's, network/shaping.py; 0: the wire's model)")


MEASURED = "measured"


def add_rank_starts(parser: argparse.ArgumentParser) -> None:
    """``--rank-starts``, which both validations take: the simulated ranks all started at
    their job's release, or as the emulated run's started (benchmarks/rank_starts.py, per point
    and method, each then simulated alone)."""
    parser.add_argument("--rank-starts", choices=("together", MEASURED), default="together",
                        help="measured: each point's and method's ranks start as the emulated run's did (skew and exponential "
                             "jitter, benchmarks/rank_starts.py), each point simulated alone (default: together)")


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE`` (repeatable), which both validations pass on to every simulated run."""
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for the simulated runs, e.g. simulation.switch_packet_cost_us=28.1 or "
                             "simulation.rank_start_skew_us=1500 (repeatable)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="emulated run folders (with summary.json)")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "results" / "benchmarks" / "simulation_validation.csv")
    parser.add_argument("--seeds", type=int, default=0, help="simulate each config with seeds 1..N and compare distributions")
    add_link_burst(parser)
    add_rank_starts(parser)
    add_overrides(parser)
    args = parser.parse_args(argv)
    if args.seeds < 0:
        parser.error(f"--seeds must be >= 0, got {args.seeds}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    out_root = args.output.with_suffix("") / utc_stamp()
    out_root.mkdir(parents=True)
    if args.seeds:
        rows = [row for run in args.runs for row in compare_seeds(run, out_root, args.seeds, args.link_burst_bytes, args.rank_starts == MEASURED,
                                                                 tuple(args.overrides))]
        write_csv(args.output.with_name(f"{args.output.stem}_seeds.csv"), SEED_COLUMNS, rows)
        sys.stdout.write(markdown_seeds(rows) + "\n")
    else:
        rows = [row for run in args.runs for row in compare(run, out_root, args.link_burst_bytes, args.rank_starts == MEASURED, tuple(args.overrides))]
        write_csv(args.output, COLUMNS, rows)
        sys.stdout.write(markdown(rows) + "\n")
    return 0 if all(r["simulated_verified"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
