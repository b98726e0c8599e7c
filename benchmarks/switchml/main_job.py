"""The main job, run as a new user runs it, several times in a row: does it verify and keep up every time?

Each run is ``run_experiment.py configs/8workers.yaml`` with nothing but ``--switch`` (the
README's command; ``auto`` unless ``--target`` names one) and its own results folder. One
row per run goes to results/benchmarks/main_job.csv (``--output``): its exit status and wall
time, the target and link rate, ``kept_up`` and the busiest the machine was, and per
method the median TAT, the share of SwitchML's line-rate bound, the retransmissions and
whether it verified. A run's results folder and log are kept under
results/benchmarks/main_job/. ``--tabulate RUN_DIR...`` writes and prints the rows of runs
made already (their status and wall time as their summaries give them).

    .venv/bin/python benchmarks/switchml/main_job.py --runs 3                 # auto's target
    .venv/bin/python benchmarks/switchml/main_job.py --runs 10 --target ebpf
    .venv/bin/python benchmarks/switchml/main_job.py --tabulate results/8workers/2026*

Run as root; a run takes 1-6 minutes (eBPF switch to bmv2).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from experiments.results import utc_stamp  # noqa: E402
from protocol.results_format import SUMMARY_FILE  # noqa: E402

log = logging.getLogger("main_job")

MAIN_CONFIG = REPO_ROOT / "configs" / "8workers.yaml"
METHODS = ("switchml", "ring", "ps")
COLUMNS = ("run", "status", "wall_s", "switch_target", "link_mbps", "kept_up", "max_machine_busy", "verified",
           *(f"{m}_{what}" for m in METHODS for what in ("tat_s", "retransmissions", "verified")), "switchml_share_of_bound")


def run_once(out: Path, target: str | None) -> tuple[int, float]:
    """One run of the README's command into ``out``; its exit status and wall time (its log beside it)."""
    argv = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(MAIN_CONFIG), "--out", str(out)]
    argv += ["--switch", target] if target else []
    started = time.monotonic()
    with out.with_suffix(".log").open("w") as log_file:
        status = subprocess.run(argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    return status, time.monotonic() - started


def row(run_dir: Path, status: int | None = None, wall_s: float | None = None) -> dict[str, Any]:
    """What one run's summary says (a run without one: its status only). Without ``status``
    and ``wall_s`` (a run made already), what its summary implies: 0 verified, 1 not, and
    its duration."""
    entry: dict[str, Any] = dict.fromkeys(COLUMNS)
    entry.update(run=run_dir.name, status=status, wall_s=None if wall_s is None else round(wall_s, 1))
    summary_path = run_dir / SUMMARY_FILE
    if not summary_path.is_file():
        return entry
    summary = json.loads(summary_path.read_text())
    if status is None:
        entry["status"] = 0 if summary["verified"] else 1
    entry.update(switch_target=summary["switch_target"], link_mbps=summary["link_mbps"], kept_up=summary["kept_up"],
                 max_machine_busy=summary["max_machine_busy_fraction"], verified=summary["verified"])
    for method, measured in summary["methods"].items():
        entry.update({f"{method}_tat_s": round(measured["tat_s"], 3), f"{method}_retransmissions": measured["retransmissions"],
                      f"{method}_verified": measured["verified"]})
        if "ate_fraction_of_bound" in measured:
            entry["switchml_share_of_bound"] = round(measured["ate_fraction_of_bound"], 4)
    if wall_s is None:
        entry["wall_s"] = summary["duration_s"]
    return entry


def write(rows: list[dict[str, Any]], output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    new = not output.exists()
    with output.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        writer.writerows(rows)


def table(rows: list[dict[str, Any]]) -> str:
    """The rows as a markdown table, for benchmarks/README.md."""
    head = ("run", "status", "wall s", "target", "Mbit/s", "kept_up", "busy", "SwitchML TAT s", "of bound", "ring TAT s",
            "PS TAT s", "PS retx", "verified")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = (r["run"], r["status"], r["wall_s"], r["switch_target"], r["link_mbps"], r["kept_up"], r["max_machine_busy"],
                 r["switchml_tat_s"], f"{r['switchml_share_of_bound']:.1%}" if r["switchml_share_of_bound"] else "",
                 r["ring_tat_s"], r["ps_tat_s"], r["ps_retransmissions"], r["verified"])
        lines.append("| " + " | ".join("" if c is None else str(c) for c in cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--target", help="--switch for every run (default: the config's, auto)")
    parser.add_argument("--tabulate", type=Path, nargs="+", metavar="RUN_DIR", help="rows of runs made already; runs nothing")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "results" / "benchmarks" / "main_job.csv")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    rows = []
    if args.tabulate:
        rows = [row(run_dir) for run_dir in args.tabulate]
    else:
        folder = args.output.with_suffix("")
        folder.mkdir(parents=True, exist_ok=True)
        for index in range(args.runs):
            out = folder / f"{utc_stamp()}-{index + 1}"
            status, wall_s = run_once(out, args.target)
            rows.append(row(out, status, wall_s))
            log.info("run %d of %d: exit %d in %.0f s (%s)", index + 1, args.runs, status, wall_s, out)
    write(rows, args.output)
    print(table(rows))
    print(f"rows appended to {args.output}")
    return 0 if all(r["status"] == 0 and r["kept_up"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
