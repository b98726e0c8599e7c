"""When the emulator's ranks start, measured from an emulated run: the parameters of the
simulated clock's ``RankStarts`` (``simulation.rank_start_skew_us`` and
``simulation.rank_start_jitter_us``, simulation/network.py).

The emulator tells a job's ranks to start one after another through their pipes and each
starts when the scheduler runs it. Every rank of a job ends with the job's last result, so
rank 0's TAT minus rank r's is how much later rank r started (plus any difference in when
the two took that result, which the model counts as start too). The model starts rank r at
r x skew + e_r after the release, e_r drawn from an exponential distribution of mean
``jitter``; so rank 0's TAT minus rank r's is r x skew + e_r - e_0, whose mean is r x skew
and whose variance is 2 x jitter^2. Per point of the run (one per sweep value), and per
method of a run of single jobs (runs.csv) or per job of a shared switch (jobs.csv): skew is
the least-squares slope through 0 of those differences over r (0 if it comes out below 0),
jitter the root of half their residuals' mean square.

    .venv/bin/python benchmarks/rank_starts.py RUN_DIR...

prints a row per point and method; the validations take them for each point with
``--rank-starts measured`` (benchmarks/README.md, "Simulated against emulated").
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from protocol import results_format as fmt  # noqa: E402


@dataclass(frozen=True)
class MeasuredStarts:
    """One point's and method's ranks' starts as the model takes them, and over how many ranks after rank 0."""

    skew_us: float
    jitter_us: float
    samples: int

    def overrides(self) -> list[str]:
        """The config overrides that give the simulated clock these starts."""
        return [f"simulation.rank_start_skew_us={self.skew_us:.1f}", f"simulation.rank_start_jitter_us={self.jitter_us:.1f}"]


def estimate(ranks: np.ndarray, later: np.ndarray) -> MeasuredStarts:
    """The model's skew and jitter from each rank's (``ranks`` > 0) start after its job's rank 0 (``later``, s)."""
    if not len(ranks):
        raise ValueError("no rank after rank 0 to measure a start from (jobs of one worker)")
    slope = float(ranks @ later / (ranks @ ranks))
    skew = max(0.0, slope)
    jitter = math.sqrt(float(np.mean((later - skew * ranks) ** 2)) / 2)
    return MeasuredStarts(round(skew * 1e6, 1), round(jitter * 1e6, 1), len(ranks))


def later_than_rank0(runs: pd.DataFrame, job: list[str]) -> pd.DataFrame:
    """Each rank's start after rank 0's of its job (rows grouped by ``job``): rank 0's TAT minus its own."""
    first = runs[runs["rank"] == 0].set_index(job)["tat_s"].rename("rank0_tat_s")
    joined = runs.join(first, on=job)
    return joined.assign(later_s=joined["rank0_tat_s"] - joined["tat_s"])[lambda d: d["rank"] > 0]


def measure(run: Path) -> dict[tuple[int, str], MeasuredStarts]:
    """(point, method) -> its measured starts, for an emulated run folder of single jobs or of a shared switch."""
    if (run / fmt.JOBS.file).is_file():
        [method] = yaml.safe_load((run / fmt.CONFIG_FILE).read_text())["methods"]
        later = later_than_rank0(pd.read_csv(run / fmt.JOBS.file).assign(method=method), ["point", "repetition", "job_id"])
    else:
        later = later_than_rank0(pd.read_csv(run / fmt.RUNS.file), ["point", "method", "repetition"])
    return {(int(point), str(method)): estimate(group["rank"].to_numpy(float), group["later_s"].to_numpy(float))
            for (point, method), group in later.groupby(["point", "method"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path, nargs="+", help="emulated run folders (runs.csv or jobs.csv)")
    args = parser.parse_args(argv)
    print("| run | point | method | skew µs | jitter µs | ranks measured |")
    print("|---|---:|---|---:|---:|---:|")
    for run in args.runs:
        for (point, method), starts in measure(run).items():
            print(f"| {run.resolve().name} | {point} | {method} | {starts.skew_us:.0f} | {starts.jitter_us:.0f} | {starts.samples} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
