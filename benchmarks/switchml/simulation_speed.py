"""How fast the simulated clock runs: wall time of simulated all-reduces at paper scale.

Each case is the main job's config (configs/8workers.yaml, SwitchML only) with ``--set``
overrides, built exactly as ``run_experiment.py --simulate`` builds it
(experiments/simulated.py), and one all-reduce timed: wall seconds, simulated TAT,
its share of SwitchML's pace (methods/switchml.py), frames handled per wall second and per
second of the process's CPU time (on a loaded machine the two part). One row
per case goes to results/benchmarks/simulation_speed.csv (``--output``); ``--profile``
prints where the time of the first case goes (cProfile, top 25 by own time). Each case runs
``--repeat`` times (default 3), each on a fresh network, one row each. No timing is
asserted: the target (8 workers, 100 Gbit/s, 4 MiB in <= 10 s) is read off the table
(benchmarks/README.md, "Simulation speed").

    .venv/bin/python benchmarks/switchml/simulation_speed.py                # 8 and 32 workers, 4 MiB
    .venv/bin/python benchmarks/switchml/simulation_speed.py --large        # also 32 workers, 100 MiB (int32)
    .venv/bin/python benchmarks/switchml/simulation_speed.py --profile
    .venv/bin/python benchmarks/switchml/simulation_speed.py --data-path python   # core.py on SimPy
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import logging
import pstats
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from experiments.config import CONFIG_DIR, load_experiment  # noqa: E402
from experiments.harness import worker_spec  # noqa: E402
from experiments.simulated import attach_workers, check_simulable, point_simulation, simulated_target  # noqa: E402
from methods.switchml import switchml_job_pace  # noqa: E402
from methods.verification import expected_for, integer_sum  # noqa: E402
from protocol.params import mbps_to_bps  # noqa: E402
from workloads.kinds import point_inputs  # noqa: E402

log = logging.getLogger("simulation_speed")

MIB_ELEMENTS = 262_144
"""float32 elements in one MiB."""
PAPER_MBPS = 100_000.0
COLUMNS = ("repetition", "workers", "link_mbps", "elements", "dtype", "tensor_mib", "core", "wall_s", "cpu_s", "setup_s", "simulated_tat_s",
           "share_of_pace", "frames", "frames_per_wall_s", "frames_per_cpu_s", "retransmissions", "verified")


@dataclass(frozen=True)
class Case:
    workers: int
    mib: int
    dtype: str = "float32"
    mbps: float = PAPER_MBPS


CASES = (Case(8, 4), Case(32, 4))
LARGE = (Case(32, 100, "int32"),)
"""int32: 32 workers' 100 MiB float32 tensors with their float64 reference sums
(methods/verification.py) need more memory than this machine's 23 GB; an int32 job is
checked against its wrap-around integer sum, accumulated in place."""


def verified(tensors: list[np.ndarray], results: list, k: int) -> bool:
    """Every rank's result is the switch's exact integer sum (methods/verification.py's
    check for float32; the wrap-around int32 sum, built in one array, for int32)."""
    if tensors[0].dtype == np.int32:
        total = np.zeros_like(tensors[0])
        for tensor in tensors:
            np.add(total, tensor, out=total)
        return all(np.array_equal(r.int_sum, total) for r in results)
    expected = expected_for(tensors, k)
    return all(integer_sum(expected, r.values, r.int_sum).verified for r in results)


def run_case(case: Case, profile: bool, data_path: str = "auto") -> dict[str, object]:
    overrides = ["methods=[switchml]", "repetitions=1", f"topology.workers={case.workers}", f"workload.dtype={case.dtype}",
                 f"topology.link.bw_mbps={case.mbps}", f"workload.elements={case.mib * MIB_ELEMENTS}", f"protocol.data_path={data_path}"]
    experiment = load_experiment(CONFIG_DIR / "8workers.yaml", overrides)
    target = simulated_target(experiment.data["switch"]["target"])
    experiment = check_simulable(experiment.with_target(target))
    point = experiment.points[0]
    tensors = point_inputs(point.workload, case.workers)
    began = time.perf_counter()
    net = point_simulation(experiment, point, target, "switchml")
    attach_workers(net, worker_spec(point, "switchml"))
    net.reset_aggregation()
    setup = time.perf_counter() - began
    profiler = cProfile.Profile() if profile else None
    began, cpu_began = time.perf_counter(), time.process_time()
    if profiler is not None:
        profiler.enable()
    results = net.allreduce(tensors)
    if profiler is not None:
        profiler.disable()
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    if profiler is not None:
        pstats.Stats(profiler, stream=sys.stdout).sort_stats("tottime").print_stats(25)
    ok = verified(tensors, results, point.protocol["k"])
    tat = max(r.stats.tat_s for r in results)
    pace = switchml_job_pace(len(tensors[0]), point.protocol["k"], point.protocol["pool_size"], mbps_to_bps(case.mbps), 0.0,
                            quantized=case.dtype == "float32")
    frames = sum(link.frames for link in net.links.values())
    return {"workers": case.workers, "link_mbps": case.mbps, "elements": len(tensors[0]), "dtype": case.dtype, "tensor_mib": case.mib,
            "core": net.core, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "setup_s": round(setup, 3), "simulated_tat_s": tat, "share_of_pace": round(pace.tat_s / tat, 4),
            "frames": frames, "frames_per_wall_s": round(frames / wall), "frames_per_cpu_s": round(frames / cpu), "retransmissions": sum(r.stats.retransmissions for r in results),
            "verified": ok}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--large", action="store_true", help="also 32 workers with 100 MiB (minutes)")
    parser.add_argument("--profile", action="store_true", help="cProfile the first case")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each case (a fresh network each; the first also pays "
                        "for the process's first allocations)")
    parser.add_argument("--data-path", choices=("auto", "native", "python"), default="auto",
                        help="protocol.data_path: native is worker.c on simulation/switchml/native/star.c's loop, python core.py on SimPy")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "results" / "benchmarks" / "simulation_speed.csv")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    rows = []
    for i, case in enumerate(CASES + (LARGE if args.large else ())):
        for repetition in range(1 if case in LARGE else args.repeat):
            row = {"repetition": repetition, **run_case(case, profile=args.profile and i == 0 and repetition == 0, data_path=args.data_path)}
            log.info("%s", "  ".join(f"{key}={value}" for key, value in row.items()))
            rows.append(row)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    log.info("rows in %s", args.output)
    return 0 if all(row["verified"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
