"""The multi-tenant figure's configs and a tiny version of its runs on the simulated clock:
each job's share of one register budget as its design spends it, both methods verified,
ATP's collision and PS-fallback shares read from its counters, and the figure drawn; the
emulated figure's title says its target and whether every run kept up; and the paper-scale
single-job and loss configs with ATP (make paper-sim's paper_atp_* figures)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import run_experiment
from analysis.__main__ import main as analysis_main
from analysis.multi_tenant import clock_stamp
from experiments.config import CONFIG_DIR
from experiments.kinds import load
from experiments.harness import worker_spec
from experiments.kinds.shared_switch import job_pool

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

CONFIGS = ("multi_tenant.yaml", "paper_multi_tenant.yaml")
TWO_JOBS = "[[{job_id: 11, hosts: [0, 1], pool_size: share, start_s: 0}, {job_id: 12, hosts: [2, 3], pool_size: share, start_s: 0}]]"


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("method", ["switchml", "atp"])
def test_every_job_takes_its_designs_share_of_the_same_budget(config: str, method: str) -> None:
    """SwitchML: budget / (2 x jobs) slots each (two shadow copies of k values per slot), so
    the jobs' registers sum to the budget; ATP: every job hashes into the whole pool."""
    experiment = load(CONFIG_DIR / config, [f"methods=[{method}]", "switch.target=embedded"])
    assert [len(point.data["jobs"]) for point in experiment.points] == [1, 2, 4, 8]
    for point in experiment.points:
        budget = point.data["switch"]["max_pool_size"]
        pools = [job_pool(point.data, job) for job in point.data["jobs"]]
        if method == "switchml":
            assert sum(2 * pool for pool in pools) == budget
        else:
            assert pools == [budget] * len(pools)


def test_a_tiny_multi_tenant_sweep_runs_verified_and_draws(tmp_path: Path) -> None:
    """Two jobs on a 64-aggregator budget for each method: both verified, ATP's windows of 64
    collide in the shared pool (its PS counters say how often), SwitchML's do not."""
    for method in ("switchml", "atp"):
        status = run_experiment.main([str(CONFIG_DIR / "multi_tenant.yaml"), "--simulate", "--switch", "embedded",
                                      "--out", str(tmp_path / "multi_tenant" / method),
                                      *(arg for setting in (f"methods=[{method}]", "switch.max_pool_size=64", "workload.elements=65536",
                                                            f"sweep.values={TWO_JOBS}") for arg in ("--set", setting))])
        assert status == 0
    summaries = [json.loads(path.read_text()) for path in (tmp_path / "multi_tenant").glob("*/summary.json")]
    assert len(summaries) == 2 and all(summary["verified"] for summary in summaries)
    assert analysis_main([str(tmp_path / "multi_tenant"), "--out", str(tmp_path / "figures"), "--clock", "simulated"]) == 0
    table = pd.read_csv(tmp_path / "figures" / "multi_tenant.csv")
    assert set(table["method"]) == {"switchml", "atp"}
    pools = table[table["series"] == "job_tat_s"].groupby("method")["pool_size"].first()
    assert pools["switchml"] == 16 and pools["atp"] == 64
    shares = table[table["series"].isin(["collision_share", "ps_fallback_share"])]
    assert set(shares["method"]) == {"atp"} and (shares["value"] > 0).all() and (shares["value"] < 1).all()
    assert (table[table["series"] == "total_ate_per_s"]["value"] > 0).all()
    assert not (tmp_path / "figures" / "shared_switch.png").exists()  # multi-tenant runs are this figure's alone


# --- paper scale, one job: make paper-sim's paper_atp_* figures ------------------------------------------------------

PAPER_ATP = {"paper_atp_ate_vs_workers": "paper_ate_vs_workers", "paper_atp_tat_inflation_vs_loss": "paper_tat_inflation_vs_loss"}
"""Each paper-scale config with ATP, and the SwitchML-only paper config whose settings it takes."""
TINY = {"paper_atp_ate_vs_workers": ("sweep.values=[2,3]", "ate_vs_workers"),
        "paper_atp_tat_inflation_vs_loss": ("sweep.values=[0%,1%]", "tat_inflation_vs_loss")}
"""A two-point sweep of each, and the figure it draws."""


@pytest.mark.parametrize("config", sorted(PAPER_ATP))
def test_a_paper_scale_atp_config_runs_switchmls_jobs_of_the_paper_config(config: str) -> None:
    """ATP is added beside SwitchML, not in place of the paper's settings: at every point the
    two configs share, SwitchML's workers get the same spec (links, k, pool, timer, tensor),
    so the paper_atp_* figures' SwitchML lines are the paper_* figures'."""
    with_atp = load(CONFIG_DIR / f"{config}.yaml")
    paper = load(CONFIG_DIR / f"{PAPER_ATP[config]}.yaml", ["switch.target=embedded"])
    assert {"switchml", "atp"} <= set(with_atp.points[0].methods)
    points = {point.sweep_value: point for point in with_atp.points}
    assert {point.sweep_value for point in paper.points} <= set(points)
    for point in paper.points:
        assert worker_spec(points[point.sweep_value], "switchml") == worker_spec(point, "switchml"), point.sweep_value
        assert points[point.sweep_value].topology.link_mbps == 100_000


@pytest.mark.parametrize("config", sorted(PAPER_ATP))
def test_a_tiny_paper_scale_atp_sweep_runs_verified_and_draws_both_designs(config: str, tmp_path: Path) -> None:
    """Two points of 16,384 elements, the Makefile's analysis line: both designs verified at
    every point, both in the figure's numbers under the paper_atp_ prefix."""
    sweep, figure = TINY[config]
    status = run_experiment.main([str(CONFIG_DIR / f"{config}.yaml"), "--simulate", "--out", str(tmp_path / config),
                                  "--set", sweep, "--set", "workload.elements=16384", "--set", "repetitions=1"])
    assert status == 0
    runs = pd.read_csv(tmp_path / config / "runs.csv")
    in_network = runs[runs["method"].isin(["switchml", "atp"])]
    assert set(in_network["method"]) == {"switchml", "atp"} and in_network["verified"].all()
    assert analysis_main([str(tmp_path / config), "--out", str(tmp_path / "figures"), "--prefix", "paper_atp_", "--clock", "simulated"]) == 0
    table = pd.read_csv(tmp_path / "figures" / f"paper_atp_{figure}.csv")
    assert {"switchml", "atp"} <= set(table["method"])


@pytest.mark.parametrize(("busiest", "stamp"), [(0.62, "every run kept up: machine busy at most 62%"),
                                                 (0.97, "NOT every run kept up: machine busy at most 97%")])
def test_an_emulated_figure_says_its_target_and_whether_every_run_kept_up(busiest: float, stamp: str) -> None:
    """The emulated figure's title: the switch target, and the busiest repetition of any of
    its runs against the machine's saturation (a run that did not keep up measured the emulator)."""
    numbers = pd.DataFrame([{"method": method, "budget": 16, "n_jobs": n, "series": "machine_busy_fraction", "value": value}
                            for method, n, value in (("atp", 1, 0.3), ("switchml", 4, busiest))])
    assert clock_stamp(numbers, {"switch_target": "ebpf"}) == f"emulated, ebpf switch; {stamp}"
    assert clock_stamp(numbers, {"switch_target": "ebpf", "simulated": True}) == "simulated clock"
