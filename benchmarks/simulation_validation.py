"""Simulated against emulated SwitchML TAT, point by point, for emulated runs made already.

For each emulated run folder given, its own config.yaml (the resolved config it ran with:
link rates, delays, loss, pools) is run again with ``run_experiment.py --simulate``, SwitchML
only, on the first target with a simulated data plane, with the loss where the emulated run
had it (network.json: the switches' drop simulator, or the links). Each point's median
SwitchML TAT of both runs goes to results/benchmarks/simulation_validation.csv
(``--output``) with their ratio, and a Markdown table is printed (benchmarks/README.md,
"Simulated against emulated"). The simulated runs' folders are kept under
results/benchmarks/simulation_validation/<UTC time>/. No tolerance is asserted here: the table says
where the two differ, and the README says why.

    .venv/bin/python benchmarks/simulation_validation.py results/8workers/2026* /work/meas/fig/tat_vs_size
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from experiments.results import utc_stamp  # noqa: E402
from experiments.simulated_sweep import simulated_target  # noqa: E402
from protocol.results_format import CONFIG_FILE, SUMMARY_FILE  # noqa: E402
from switches.targets import AUTO  # noqa: E402

log = logging.getLogger("simulation_validation")

COLUMNS = ("config", "emulated_run", "point", "sweep_param", "sweep_value", "emulated_target", "emulated_data_path", "link_mbps",
           "loss_mechanism", "emulated_tat_s", "simulated_tat_s", "simulated_over_emulated", "emulated_tat_s_min", "emulated_tat_s_max",
           "simulated_tat_s_min", "simulated_tat_s_max", "ranges_overlap", "emulated_retransmissions",
           "simulated_retransmissions", "simulated_verified")
DROP_SIMULATOR = "switch_drop_simulator"


def simulate(run: Path, out: Path) -> dict[str, Any]:
    """``run``'s config on the simulated clock into ``out``; its summary."""
    network = json.loads((run / "network.json").read_text())
    overrides = ["methods=[switchml]", f"switch.target={simulated_target(AUTO)}"]
    if any(point.get("loss_mechanism") == DROP_SIMULATOR for point in network.values()):
        overrides.append("loss_mechanism=switch")
    argv = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(run / CONFIG_FILE), "--simulate", "--out", str(out)]
    for override in overrides:
        argv += ["--set", override]
    done = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"{run}: --simulate failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}")
    return json.loads((out / SUMMARY_FILE).read_text())


def compare(run: Path, out_root: Path) -> list[dict[str, Any]]:
    emulated = json.loads((run / SUMMARY_FILE).read_text())
    simulated = simulate(run, out_root / f"{emulated['config']}-{run.name}")
    network = json.loads((run / "network.json").read_text())
    rows = []
    for theirs, ours in zip(emulated["points"], simulated["points"]):
        e, s = theirs["methods"].get("switchml"), ours["methods"]["switchml"]
        if e is None:
            continue
        value = theirs["sweep_value"]
        rows.append({
            "config": emulated["config"], "emulated_run": str(run), "point": theirs["point"], "sweep_param": theirs["sweep_param"] or "",
            "sweep_value": "" if value is None else (json.dumps(value) if isinstance(value, dict) else value),
            "emulated_target": emulated["switch_target"], "emulated_data_path": theirs.get("switchml_data_path", ""),
            "link_mbps": emulated["link_mbps"], "loss_mechanism": network.get(str(theirs["point"]), {}).get("loss_mechanism", ""),
            "emulated_tat_s": e["tat_s"], "simulated_tat_s": s["tat_s"], "simulated_over_emulated": round(s["tat_s"] / e["tat_s"], 4),
            "emulated_tat_s_min": e["tat_s_min"], "emulated_tat_s_max": e["tat_s_max"], "simulated_tat_s_min": s["tat_s_min"],
            "simulated_tat_s_max": s["tat_s_max"], "ranges_overlap": s["tat_s_min"] <= e["tat_s_max"] and e["tat_s_min"] <= s["tat_s_max"],
            "emulated_retransmissions": e["retransmissions"], "simulated_retransmissions": s["retransmissions"],
            "simulated_verified": s["verified"],
        })
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| config | point | emulated (target, loop) | emulated TAT s (min-max) | simulated TAT s (min-max) | sim / emu | retx emu / sim |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        point = f"{r['sweep_param']} = {r['sweep_value']}" if r["sweep_param"] else str(r["point"])
        lines.append(f"| {r['config']} | {point[:60]} | {r['emulated_target']}, {r['emulated_data_path']}, {r['link_mbps']:g} Mbit/s | "
                     f"{r['emulated_tat_s']:.4g} ({r['emulated_tat_s_min']:.4g}-{r['emulated_tat_s_max']:.4g}) | "
                     f"{r['simulated_tat_s']:.4g} ({r['simulated_tat_s_min']:.4g}-{r['simulated_tat_s_max']:.4g}) | "
                     f"{r['simulated_over_emulated']:.3f} | "
                     f"{r['emulated_retransmissions']} / {r['simulated_retransmissions']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="emulated run folders (with summary.json)")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "results" / "benchmarks" / "simulation_validation.csv")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    out_root = args.output.with_suffix("") / utc_stamp()
    out_root.mkdir(parents=True)
    rows = [row for run in args.runs for row in compare(run, out_root)]
    with args.output.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    log.info("rows in %s", args.output)
    sys.stdout.write(markdown(rows) + "\n")
    return 0 if all(r["simulated_verified"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
