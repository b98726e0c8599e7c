#!/usr/bin/env python3
"""The peak memory of runs, all their processes together, for the memory check's model
(experiments/config.py: EMULATED_MEMORY, SIMULATED_MEMORY; docs/memory.md).

Each run is run_experiment.py in a memory cgroup of its own (base/cgroup.py), whose peak
(v1 memory.max_usage_in_bytes, v2 memory.peak) counts every process it starts: the runner,
Mininet's shells, the switch and every rank. Two sizes per clock give the bytes per element
and worker (the slope) and the base. Run as root:

    .venv/bin/python benchmarks/memory_peak.py --target embedded
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from base.cgroup import memory_cgroup, memory_limit  # noqa: E402
from protocol.params import REPO_ROOT  # noqa: E402
from switches.targets import AUTO, TARGETS  # noqa: E402

RUNS = {  # clock -> (workers, the run's own options), at each of ELEMENTS
    "emulated": (8, ["--set", "topology.link.bw_mbps=null"]),
    "simulated": (32, ["--simulate"]),
}
ELEMENTS = (1 << 20, 4 << 20)


def peak_bytes(workers: int, elements: int, options: list[str]) -> int:
    """The cgroup's peak over one run of SwitchML, ring and PS, one repetition each."""
    with memory_cgroup(memory_limit()[0], "memory-peak") as cgroup, tempfile.TemporaryDirectory() as out:
        argv = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(REPO_ROOT / "configs" / "8workers.yaml"), *options,
                "--set", f"topology.workers={workers}", "--set", f"workload.elements={elements}", "--set", "repetitions=1",
                "--out", str(Path(out) / "run")]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=cgroup.join)
        return int((cgroup.path / ("memory.max_usage_in_bytes" if cgroup.version == 1 else "memory.peak")).read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=TARGETS, default=AUTO, help="the emulated runs' switch target")
    target = parser.parse_args().target
    print("clock      workers  elements   peak bytes     per element and worker")
    for clock, (workers, options) in RUNS.items():
        options = [*options, "--switch", target] if clock == "emulated" else options
        peaks = [peak_bytes(workers, elements, options) for elements in ELEMENTS]
        for elements, peak in zip(ELEMENTS, peaks):
            print(f"{clock:<10} {workers:>7}  {elements:>8}  {peak:>13,}  {peak / (elements * workers):.1f}")
        slope = (peaks[1] - peaks[0]) / ((ELEMENTS[1] - ELEMENTS[0]) * workers)
        print(f"{clock:<10} slope {slope:.1f} bytes per element and worker, base {(peaks[0] - slope * ELEMENTS[0] * workers) / 1e6:.0f} MB")


if __name__ == "__main__":
    main()
