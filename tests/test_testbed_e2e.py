"""The testbed end to end: run_experiment.py starts Mininet, runs workers, verifies, cleans up.

These really start Mininet (root) with the embedded switch, as a user's command would, and
check what the run leaves: summary.json and the tables -- and nothing else, not even
after a worker is killed mid-run or the runner is interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from protocol.switchml.plan import JobPlan
from switches.ebpf.switchml.datapath import PIN_ROOT
from tests.conftest import require_target
from tests.experiment_runs import MAIN_CONFIG, disturb_mid_run, experiment_argv, leftovers, run_experiment
from tests.results_shape import shape_differences

pytestmark = [pytest.mark.mininet, pytest.mark.slow]

if os.geteuid() != 0:
    pytest.skip("Mininet tests need root", allow_module_level=True)

SMALL = ["topology.workers=4", "workload.elements=20000", "repetitions=2"]
CHUNKS = -(-20000 // int(yaml.safe_load(MAIN_CONFIG.read_text())["protocol"]["k"]))
"""Data packets per worker of a 20,000-element job at the main config's k (79 at k = 256):
each completes once per repetition, so each switch counts at least this many results."""


def test_four_workers_through_the_embedded_switch(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_experiment(out, *SMALL)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True
    assert summary["switch_target"] == "embedded"
    assert summary["workers"] == 4
    assert set(summary["methods"]) == {"switchml", "ring", "ps"}
    switchml = summary["methods"]["switchml"]
    assert 0 < switchml["ate_per_s"] <= switchml["line_rate_bound_ate_per_s"]
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 3 * 2 * 4  # methods x repetitions x workers
    assert runs["verified"].all()
    counters = pd.read_csv(out / "switch_counters.csv")
    multicast = counters[(counters.method == "switchml") & (counters.counter == "EV_RESULT_MULTICAST")]
    assert (multicast["value"] >= CHUNKS).all()  # every chunk completed once per repetition
    frames = pd.read_csv(out / "switch_frames.csv")
    assert len(frames) == 3 * 2 and (frames[["input_lost", "output_lost"]] == 0).all().all(), frames
    assert summary["switch_lost_frames"] == []
    assert "verified: true" in done.stdout
    assert not shape_differences("sweep", out)  # the files, columns and summary keys of before the restructuring
    assert not leftovers(str(out))


@pytest.mark.bmv2
def test_bmv2_target_runs_and_verifies(tmp_path: Path) -> None:
    """p4/switchml.p4 in simple_switch under Mininet: SwitchML and the ring (TCP, forwarded
    by the P4 program's L2 tables) verify, and the run cleans up after simple_switch too."""
    require_target("bmv2")
    out = tmp_path / "run"
    argv = experiment_argv(out, *SMALL, "methods=[switchml, ring]", "repetitions=1", "topology.link.bw_mbps=1") + ["--switch", "bmv2"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["switch_target"] == "bmv2" and summary["verified"] is True
    counters = pd.read_csv(out / "switch_counters.csv").set_index(["method", "counter"])["value"]
    assert counters["switchml", "EV_RESULT_MULTICAST"] >= CHUNKS
    assert counters["ring", "EV_FORWARDED"] > 0
    assert not leftovers(str(out))


@pytest.mark.bmv2
def test_the_main_job_on_bmv2_as_the_vm_user_runs_it(tmp_path: Path) -> None:
    """configs/8workers.yaml with the target `auto` picks where bmv2 is installed (the VM),
    at a quarter of its tensor: every method verifies within its deadline, and bmv2 loses no
    frame inside itself. Before, the PS's incast (14 TCP streams into every port) filled a
    port's 200-packet queue past what bmv2's blocking port socket holds; bmv2's transmit then
    stalled every port, its queues dropped frames no counter showed (6,454 in the full job),
    and the PS missed the 60 s deadline every method had."""
    require_target("bmv2")
    out = tmp_path / "run"
    argv = experiment_argv(out, "workload.elements=262144", "repetitions=1", target="auto")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["switch_target"] == "bmv2" and summary["verified"] is True
    assert set(summary["methods"]) == {"switchml", "ring", "ps"}
    frames = pd.read_csv(out / "switch_frames.csv").set_index("method")
    for method in ("ring", "ps"):  # every frame of theirs is forwarded: what the pipeline took in, its egress sent
        assert frames.loc[method, "pipeline_in_frames"] == frames.loc[method, "pipeline_out_frames"], frames
    queues = [link["queue"] for link in json.loads((out / "network.json").read_text())["0"]["links"] if link["interface"].startswith("s1-")]
    assert queues and all(queue.startswith("pfifo ") and "cut: bmv2's port socket holds" in queue for queue in queues), queues
    assert not leftovers(str(out))


@pytest.mark.ebpf
def test_ebpf_target_runs_and_verifies(tmp_path: Path) -> None:
    """switches/ebpf in the kernel under Mininet: SwitchML and the ring (TCP, forwarded by
    the program's L2 tables) verify, every frame is accounted for, and the switch leaves
    nothing behind: its filters went with Mininet's links, and nothing stays pinned."""
    require_target("ebpf")
    out = tmp_path / "run"
    argv = experiment_argv(out, *SMALL, "methods=[switchml, ring]", "repetitions=1") + ["--switch", "ebpf"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["switch_target"] == "ebpf" and summary["verified"] is True
    assert summary["switch_lost_frames"] == []
    counters = pd.read_csv(out / "switch_counters.csv").set_index(["method", "counter"])["value"]
    assert counters["switchml", "EV_RESULT_MULTICAST"] >= CHUNKS
    assert counters["ring", "EV_FORWARDED"] > 0
    assert not leftovers(str(out))
    assert not PIN_ROOT.exists()


def test_one_percent_loss_is_survived_and_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_experiment(out, *SMALL, "methods=[switchml]", "topology.link.loss=0.01")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True
    assert summary["loss"] == 0.01
    assert summary["loss_mechanism"] in {"netem", "switch_drop_simulator"}
    runs = pd.read_csv(out / "runs.csv")
    assert runs["retransmissions"].sum() > 0, "1% loss on every link must cause retransmissions"
    if summary["loss_mechanism"] == "switch_drop_simulator":
        counters = pd.read_csv(out / "switch_counters.csv")
        dropped = counters[counters.counter.isin(["EV_DROP_SIM_INGRESS", "EGV_DROP_SIM_EGRESS"])]["value"].sum()
        assert dropped > 0
    assert not leftovers(str(out))


def test_killed_worker_fails_the_run_cleanly(tmp_path: Path) -> None:
    out = tmp_path / "run"
    code, output = disturb_mid_run(
        out, ["topology.workers=4", "workload.elements=2000000", "methods=[switchml]", "topology.link.bw_mbps=2",
              "limits.job_timeout_s=120"],  # the fastest 2M-element job at 2 Mbit/s takes ~46 s (refused below that)
        ".*--rank 2", lambda runner, worker: os.kill(worker, signal.SIGKILL),
    )
    assert code == 3, output
    assert "worker rank" in output
    assert not (out / "summary.json").exists()
    assert not leftovers(str(out))


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGHUP, signal.SIGQUIT], ids=lambda s: s.name)
def test_interrupted_run_tears_down(tmp_path: Path, stop: signal.Signals) -> None:
    """Ctrl-C, the terminal closing and Ctrl-\\ all stop the run with its teardown."""
    out = tmp_path / "run"
    code, output = disturb_mid_run(
        out, ["topology.workers=2", "workload.elements=2000000", "topology.link.bw_mbps=2"],
        "", lambda runner, worker: runner.send_signal(stop),
    )
    assert code == 130, output
    assert "interrupted" in output
    assert not leftovers(str(out))


def test_bad_config_fails_before_starting_anything(tmp_path: Path) -> None:
    done = run_experiment(tmp_path / "run", "protocol.k=0")
    assert done.returncode == 2
    assert "protocol.k: 0 is not one of [32, 64, 128, 256]" in done.stderr
    assert not (tmp_path / "run").exists()


def test_two_level_tree_aggregates_at_the_spine(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_experiment(out, "topology.file=tree.yaml", "topology.workers=4", "workload.elements=20000",
                          "repetitions=1", "methods=[switchml, ring]")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((out / "summary.json").read_text())["verified"] is True
    counters = pd.read_csv(out / "switch_counters.csv")
    switchml = counters[counters.method == "switchml"].set_index(["switch", "counter"])["value"]
    assert switchml["s1", "EV_RESULT_MULTICAST"] >= CHUNKS  # the spine aggregates
    for leaf in ("s2", "s3"):  # leaves carry SwitchML traffic as ordinary frames
        assert switchml[leaf, "EV_RESULT_MULTICAST"] == 0
        assert switchml[leaf, "EV_FORWARDED"] > 0
    assert not leftovers(str(out))


def test_two_level_tree_aggregates_hierarchically_and_recovers_uplink_loss(tmp_path: Path) -> None:
    """Each leaf sums its two workers and sends one partial sum per slot up; the spine sums
    the leaves. 2 % loss on the leaf-spine links only (the spine's drop simulator) must be
    recovered exactly: lost partial sums and lost results are asked again by the leaves."""
    out = tmp_path / "run"
    done = run_experiment(out, "topology.file=tree.yaml", "topology.workers=4", "topology.aggregation=hierarchical",
                          "topology.uplink.loss=0.02", "workload.elements=20000", "repetitions=1", "methods=[switchml]")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True
    assert summary["aggregation"] == summary["network"]["0"]["aggregation"] == "hierarchical"
    counters = pd.read_csv(out / "switch_counters.csv").set_index(["switch", "counter"])["value"]
    slots = CHUNKS
    assert counters["s1", "EV_RESULT_MULTICAST"] >= slots  # the spine completes every slot ...
    for leaf in ("s2", "s3"):  # ... from one partial sum per leaf and slot (more only to recover loss)
        assert counters[leaf, "EV_PARTIAL_UP"] >= slots
        assert counters[leaf, "EV_RESULT_MULTICAST"] >= slots
        assert counters[leaf, "EV_FORWARDED"] == 0
    assert counters["s1", "EV_DROP_SIM_INGRESS"] + counters["s1", "EGV_DROP_SIM_EGRESS"] > 0, "the uplinks lost packets"
    assert not leftovers(str(out))


def test_jobs_sharing_a_switch_each_verify(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_experiment(out, "topology.workers=4", "methods=[switchml]", "repetitions=1", "workload.elements=20000",
                          "jobs=[{job_id: 3, hosts: [0, 1], pool_size: 32}, {job_id: 5, hosts: [3, 2], pool_size: 16, elements: 7000, start_s: 0.2}]")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True
    jobs = pd.read_csv(out / "jobs.csv")
    assert sorted(jobs.groupby("job_id")["elements"].first().items()) == [(3, 20000), (5, 7000)]
    assert jobs["verified"].all()
    assert not shape_differences("shared", out)
    assert not leftovers(str(out))


def test_resume_finishes_an_interrupted_sweep_without_duplicates(tmp_path: Path) -> None:
    out = tmp_path / "run"
    overrides = ["topology.workers=2", "methods=[switchml]", "repetitions=2", "topology.link.bw_mbps=2",
                 "sweep={param: workload.elements, values: [5000, 150000]}"]

    def interrupt_after_first_repetition_of_point_1(runner: subprocess.Popen, worker: int) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runs = out / "runs.csv"
            if runs.exists() and any(line.startswith("1,") for line in runs.read_text().splitlines()):
                break
            time.sleep(0.05)
        runner.send_signal(signal.SIGINT)

    code, output = disturb_mid_run(out, overrides, "/work/point1", interrupt_after_first_repetition_of_point_1)
    assert code == 130, output
    partial = pd.read_csv(out / "runs.csv")
    assert set(partial[partial.point == 1]["repetition"]) == {0}  # interrupted inside point 1

    argv = experiment_argv(out, *overrides)
    argv[argv.index("--out")] = "--resume"
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "skipped (resume)" in done.stderr
    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 2 * 2 * 2  # points x repetitions x workers, each once
    assert not runs.duplicated(["point", "method", "repetition", "rank"]).any()
    assert json.loads((out / "summary.json").read_text())["verified"] is True
    assert not leftovers(str(out))


def test_link_delay_without_netem_comes_from_the_switch_and_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = run_experiment(out, "topology.workers=2", "topology.link.delay_ms=40", "methods=[switchml]",
                          "repetitions=1", "workload.elements=20000")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True
    expected = "netem" if summary["network"]["0"]["tc_capabilities"]["netem"] else "switch_delay_line"
    assert summary["delay_mechanism"] == expected
    assert {link["delay"] for link in summary["network"]["0"]["links"]} == {"netem 40.0 ms" if expected == "netem" else expected}
    # every packet of a slot waits for the round trip (>= 80 ms) of the slot's packet before it: more
    # than the links' serialisation of the whole job (143 frames, 0.16 s at 7.5 Mbit/s), so only a delay gives it
    config = yaml.safe_load(MAIN_CONFIG.read_text())
    plan = JobPlan.make(20000, int(config["protocol"]["k"]), int(config["protocol"]["pool_size"]), quantized=True)
    rounds = -(-plan.total_packets // plan.n_slots)  # 3 at k = 256: 79 chunks and 64 exponent-only packets on 64 slots
    assert rounds >= 3 and summary["methods"]["switchml"]["tat_s"] >= rounds * 0.080
    assert not leftovers(str(out))
