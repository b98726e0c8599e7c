"""benchmarks/rank_starts.py: the ranks' start skew and jitter measured from a run's per-rank
TATs are the ones the ranks started with (the simulated clock's ``RankStarts`` drawing them)."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest
import yaml

from benchmarks.rank_starts import estimate, measure
from simulation.network import RankStarts

SKEW_S, JITTER_S, END_S = 0.0011, 0.0008, 1.0


def tats(ranks: int, jobs: int, seed: int = 1) -> list[list[float]]:
    """Each job's ranks' TATs when they start as ``RankStarts`` draws them and all end at END_S."""
    starts, rng = RankStarts(SKEW_S, JITTER_S), random.Random(seed)
    return [[END_S - delay for delay in starts.delays(ranks, rng)] for _ in range(jobs)]


@pytest.mark.parametrize("ranks", [2, 16])
def test_the_skew_and_jitter_the_ranks_started_with_are_measured_back(ranks: int) -> None:
    jobs = tats(ranks, 4000 // ranks)
    later = pd.DataFrame([(rank, job[0] - tat) for job in jobs for rank, tat in enumerate(job) if rank], columns=["rank", "later_s"])
    measured = estimate(later["rank"].to_numpy(float), later["later_s"].to_numpy(float))
    assert measured.skew_us == pytest.approx(SKEW_S * 1e6, rel=0.1)
    assert measured.jitter_us == pytest.approx(JITTER_S * 1e6, rel=0.1)
    assert measured.overrides() == [f"simulation.rank_start_skew_us={measured.skew_us:.1f}",
                                    f"simulation.rank_start_jitter_us={measured.jitter_us:.1f}"]


def test_a_run_is_measured_per_point_and_method_from_runs_or_from_jobs(tmp_path: Path) -> None:
    """Single jobs (runs.csv: per point, method and repetition) and a shared switch (jobs.csv:
    per point, repetition and job, its one method in config.yaml) give a row per point and method."""
    single, shared = tmp_path / "single", tmp_path / "shared"
    single.mkdir()
    shared.mkdir()
    rows = [{"point": point, "method": method, "repetition": rep, "rank": rank, "tat_s": tat}
            for point in (0, 1) for method in ("switchml", "atp") for rep, job in enumerate(tats(4, 200, seed=point))
            for rank, tat in enumerate(job)]
    pd.DataFrame(rows).to_csv(single / "runs.csv", index=False)
    measured = measure(single)
    assert sorted(measured) == [(0, "atp"), (0, "switchml"), (1, "atp"), (1, "switchml")]
    assert measured[0, "atp"] == measured[0, "switchml"] != measured[1, "atp"]
    assert measured[1, "atp"].skew_us == pytest.approx(SKEW_S * 1e6, rel=0.2)

    pd.DataFrame([{**row, "job_id": 11 + row["repetition"] % 2, "repetition": row["repetition"] // 2} for row in rows if row["method"] == "atp"]
                 ).drop(columns="method").to_csv(shared / "jobs.csv", index=False)
    (shared / "config.yaml").write_text(yaml.safe_dump({"methods": ["atp"]}))
    assert measure(shared) == {key: value for key, value in measured.items() if key[1] == "atp"}
