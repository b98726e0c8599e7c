"""Jobs sharing a switch: the config's rules, the control plane's slot partition, how a run's
per-job and total throughput are computed from jobs.csv, and the figure ``python -m analysis``
draws from a run the writer wrote, without a network; and two ATP jobs on one pool of
aggregators through Mininet, each with its own parameter server."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pandas as pd
import pytest

import run_experiment
from analysis.__main__ import main as analysis_main
from experiments.config import CONFIG_DIR
from experiments.kinds import load
from experiments.kinds.shared_switch import SharedSwitchWriter
from methods.verification import Verdict
from protocol import results_format as fmt
from experiments.metrics import shared_switch_jobs, shared_switch_totals
from base.yamlschema import ConfigError
from switches.switchml import programming
from tests.conftest import require_target

SHARED = CONFIG_DIR / "shared_switch.yaml"


def test_partition_gives_consecutive_ranges_in_order() -> None:
    assert programming.partition_slots([(5, 64), (3, 32), (9, 160)], 256) == [range(0, 64), range(64, 96), range(96, 256)]


def test_oversubscribed_pools_are_refused_naming_every_job() -> None:
    with pytest.raises(programming.AdmissionError, match=r"64 \(job 1\) \+ 200 \(job 2\) = 264 slots, the switch has 256"):
        programming.partition_slots([(1, 64), (2, 200)], 256)
    with pytest.raises(programming.AdmissionError, match="job ids must differ"):
        programming.partition_slots([(1, 8), (1, 8)], 256)


def test_admitted_jobs_get_their_range_and_group() -> None:
    worker = [programming.WorkerPort(0, 1, "02:00:00:00:00:01", "10.0.0.1")]
    jobs = programming.admit_jobs([programming.JobRequest(4, worker, 10), programming.JobRequest(6, worker, 20)], 64)
    assert [(j.job_id, j.result_mcast_grp, j.slot_base, j.pool_size) for j in jobs] == [(4, 2, 0, 10), (6, 3, 10, 20)]
    assert jobs[1].slots(64) == range(10, 30)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("switch.max_pool_size=128", "admission refused: the jobs' pools need 64 (job 11) + 64 (job 12) + 64 (job 13) + 64 (job 14) = 256"),
        ("sweep.values=[[{job_id: 1, hosts: [0, 1], pool_size: 8}, {job_id: 2, hosts: [1, 2], pool_size: 8}]]", "host 1 is in job 1 and job 2"),
        ("sweep.values=[[{job_id: 1, hosts: [0, 8], pool_size: 8}]]", "job 1 names host 8; the topology has hosts 0..7"),
        ("methods=[switchml, ring]", "jobs sharing a switch run one in-network method"),
    ],
)
def test_bad_jobs_name_what_is_wrong(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load(SHARED, [override])
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sweep.values=[[{job_id: 1, hosts: [0, 1], pool_size: 64}, {job_id: 1, hosts: [2, 3], pool_size: 64}]]",
         "job ids must differ between jobs sharing a switch, got [1, 1]"),
        ("sweep.values=[[{job_id: 1, hosts: [0, 1], pool_size: 64}, {job_id: 2, hosts: [2, 3], pool_size: 512}]]",
         "pools of 512 (job 2) are larger than the switch's shared pool of 256"),
    ],
)
def test_bad_shared_pool_jobs_name_what_is_wrong(override: str, message: str) -> None:
    """ATP's jobs all hash into one pool, so their pools may add up to more than the switch
    has; each must still fit it, and their ids (the owner tag) must differ."""
    with pytest.raises(ConfigError) as error:
        load(SHARED, ["methods=[atp]", override])
    assert message in str(error.value)


def test_total_is_all_elements_over_the_makespan() -> None:
    """Job 1 (2 workers) runs 0..2 s, job 2 starts at 1 s and takes 3 s: 300 elements in 4 s."""
    rows = pd.DataFrame([
        {"point": 0, "n_jobs": 2, "repetition": 0, "job_id": 1, "released_s": 0.0, "tat_s": tat, "elements": 100, "n_workers": 2,
         "pool_size": 8, "start_s": 0.0, "verified": True} for tat in (1.5, 2.0)
    ] + [{"point": 0, "n_jobs": 2, "repetition": 0, "job_id": 2, "released_s": 1.0, "tat_s": 3.0, "elements": 200, "n_workers": 1,
          "pool_size": 8, "start_s": 1.0, "verified": True}])
    jobs = shared_switch_jobs(rows)
    assert jobs.set_index("job_id")["ate_per_s"].to_dict() == {1: 50.0, 2: 200 / 3}
    totals = shared_switch_totals(jobs)
    assert (totals["makespan_s"].item(), totals["total_ate_per_s"].item()) == (4.0, 75.0)


def test_python_m_analysis_draws_the_newest_shared_switch_run(tmp_path, caplog) -> None:
    """A run written by the shared-switch writer (jobs.csv by the results-format contract, no
    runs.csv) is found and drawn by the one figure command, which skips the sweep figures."""
    experiment = load(SHARED, ["switch.target=embedded", "repetitions=2"])
    run = tmp_path / "shared_switch" / "run"
    writer = SharedSwitchWriter(run, experiment, "embedded")
    for point in experiment.points:
        for repetition in range(point.repetitions):
            for job in point.data["jobs"]:
                reports = [{"stats": {"tat_s": 0.5 + 0.1 * rank + 0.01 * repetition, "retransmissions": 0}} for rank in range(2)]
                writer.add_job(point, repetition, job, job.get("start_s", 0.0), reports, [Verdict(True, 0.0, "")] * 2, 0.5)
    summary = writer.finalize(True)
    assert (run / fmt.JOBS.file).read_text().splitlines()[0] == ",".join(fmt.JOBS.columns)
    assert summary["kind"] == fmt.SHARED_SWITCH_KIND and [p["n_jobs"] for p in summary["points"]] == [1, 2, 4]
    with caplog.at_level(logging.INFO):
        assert analysis_main([str(tmp_path), "--out", str(tmp_path / "figures")]) == 0
    for suffix in ("png", "pdf", "csv"):
        assert (tmp_path / "figures" / f"shared_switch.{suffix}").stat().st_size > 0
    assert "skipped ate_vs_workers: no runs.csv" in caplog.text
    assert "skipped hierarchical: no run comparing aggregation modes" in caplog.text


ATP_ELEMENTS, ATP_K, ATP_POOL = 16384, 256, 2
ATP_TWO_JOBS = ("sweep.values=[[{job_id: 21, hosts: [0, 1], pool_size: share, start_s: 0}, "
                "{job_id: 22, hosts: [2, 3], pool_size: share, start_s: 0}]]")


@pytest.mark.mininet
@pytest.mark.parametrize("target", ["embedded", pytest.param("ebpf", marks=pytest.mark.ebpf)])
def test_two_atp_jobs_on_the_same_aggregators_end_exact_through_mininet(target: str, tmp_path: Path) -> None:
    """Two ATP jobs released together, each hashing its window of 2 positions into the same
    2 aggregators, each with its own parameter server host. A job holds an aggregator from its
    first worker's packet until its PS's result comes back, longer than a frame takes, so
    each job holds both most of the time and the other's packets find them taken (with 8 of
    each, the eBPF switch's jobs ran in lockstep and never met). The switch passes such a
    packet on to its job's PS, which finishes the chunk: every rank's sum is exact (ATP's
    verifier), and the collisions are counted by the switch and by the PSs (their statistics
    on exit, in their logs)."""
    if os.geteuid() != 0:
        pytest.skip("Mininet needs root")
    require_target(target)
    out = tmp_path / "run"
    settings = ["methods=[atp]", ATP_TWO_JOBS, f"switch.max_pool_size={ATP_POOL}", f"protocol.pool_size={ATP_POOL}",
                f"protocol.atp.window={ATP_POOL}", "repetitions=1", f"workload.elements={ATP_ELEMENTS}", f"protocol.k={ATP_K}"]
    code = run_experiment.main([str(SHARED), "--switch", target, "--out", str(out), *(arg for s in settings for arg in ("--set", s))])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] and summary["kind"] == fmt.SHARED_SWITCH_KIND
    assert [(job_id, job["pool_size"], job["verified"]) for job_id, job in summary["points"][0]["jobs"].items()] == [
        ("21", ATP_POOL, True), ("22", ATP_POOL, True)]
    jobs = pd.read_csv(out / fmt.JOBS.file)
    assert len(jobs) == 4 and jobs["verified"].all() and (jobs["max_abs_error"] >= 0).all()
    # one PS host per job, cabled to the aggregating switch
    assert list(json.loads((out / "network.json").read_text())["0"]["server_hosts"]) == ["srv1", "srv2"]
    switch = pd.read_csv(out / fmt.SWITCH_COUNTERS.file).groupby("counter")["value"].sum()
    chunks = 2 * ATP_ELEMENTS // ATP_K  # both jobs'
    assert switch["EV_COLLISION_TO_PS"] > 0
    assert switch["EV_RESULT_FREED"] + switch["EV_RESULT_NOT_OWNER"] >= chunks
    collided = 0
    for server in ("srv1", "srv2"):
        [stopped] = [line for line in (out / "logs" / "point0" / f"{server}.log").read_text().splitlines() if "parameter server stopped" in line]
        ps = json.loads(stopped.split("stopped: ", 1)[1])["core"]
        assert ps["sequences_from_switch"] + ps["sequences_from_parts"] == ATP_ELEMENTS // ATP_K
        collided += ps["collided_sequences"]
    assert collided > 0
