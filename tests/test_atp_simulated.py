"""ATP on the simulated clock, through ``run_experiment.py --simulate`` end to end: its worker
core under the generic driver, its parameter server on the server host the simulated network
cables to the aggregating switch, its embedded pipeline as the simulated switch (ECN from the
egress link's queue), programmed by its record's ``program_fabric``, and its verifier.

Beside SwitchML on one network, several jobs hashing into one pool (collisions to the PS),
loss on every link, and a training checked step by step; each verified, with ATP's counters in the results
(protocol_counters.csv, switch_counters.csv); a tree refused in one line. No root, seconds each.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import run_experiment
from experiments.config import CONFIG_DIR
from hosts.atp import core as atp_core
from hosts.atp.worker import HOLD_MAX_S, HOLD_SHARE
from protocol.atp.packet import frame_bytes
from switches.atp.programming import read_event_counters
from switches.embedded.atp.simulated import ATPSwitch

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

N_WORKERS, K, ELEMENTS = 8, 256, 65536
PACKETS = ELEMENTS // K


def run(config: Path, out: Path, *settings: str) -> int:
    return run_experiment.main([str(config), "--simulate", "--out", str(out), *(arg for s in settings for arg in ("--set", s))])


def sweep(out: Path, *overrides: str) -> int:
    """configs/8workers.yaml on the embedded switch's simulated pipeline, with a smaller tensor."""
    return run(CONFIG_DIR / "8workers.yaml", out, "switch.target=embedded", "methods=[switchml,atp,ring,ps]", "repetitions=2",
               f"workload.elements={ELEMENTS}", *overrides)


def counts(table: pd.DataFrame, **where: object) -> dict[str, int]:
    for column, value in where.items():
        table = table[table[column] == value]
    return table.groupby("counter")["value"].sum().to_dict()


def test_atp_beside_switchml_runs_verified_with_its_parameter_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sweep(tmp_path / "run") == 0
    out = tmp_path / "run"
    header = capsys.readouterr().out.splitlines()
    # each protocol's worker names its own loop (ATP's once read as SwitchML's star.c)
    assert any(line.startswith("  SwitchML worker: SwitchML's") for line in header), header
    assert any(line.startswith("  ATP worker: ATP's worker core on the simulated clock") for line in header), header
    summary = json.loads((out / "summary.json").read_text())
    assert summary["simulated"] and summary["verified"]
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["method"].unique()) == ["atp", "switchml"] and runs["verified"].all()
    atp = runs[runs["method"] == "atp"]
    assert len(atp) == 2 * N_WORKERS and (atp["packets_sent"] == PACKETS).all() and (atp["retransmissions"] == 0).all()
    # the PS's host: from the top of the subnet, below the switch's .254, on the aggregating switch with the workers' link
    [(name, server)] = json.loads((out / "network.json").read_text())["0"]["server_hosts"].items()
    assert name == "srv1" and server["ipv4"] == "10.0.0.253" and server["cabled_to"] == "s1"
    # the switch summed every chunk and sent it to the PS once, which freed it with its result
    switch = counts(pd.read_csv(out / "switch_counters.csv"), method="atp", repetition=1)
    assert switch["EV_AGGREGATED"] == PACKETS * (N_WORKERS - 1) and switch["EV_FULL_TO_PS"] == PACKETS
    assert switch["EV_RESULT_FREED"] == PACKETS and switch["EGV_SENT"] == PACKETS * (N_WORKERS + 1)
    own = pd.read_csv(out / "protocol_counters.csv")
    assert list(own["method"].unique()) == ["atp"], "SwitchML counts nothing of its own here"
    ps = counts(own, role="server", repetition=1)
    assert ps["full_sums"] == ps["sequences_from_switch"] == ps["results_sent"] == PACKETS and ps["partial_sums"] == 0
    assert set(own[own["role"] == "worker"]["index"]) == set(range(N_WORKERS))


def test_a_parameter_server_whose_results_are_wrong_fails_verification(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same run with the PS adding one to the last value of every result: the verifier sees it."""
    receive = atp_core.ServerHostCore.receive

    def wrong(self, now: float, received):
        return [frame[:-1] + bytes([(frame[-1] + 1) & 0xFF]) for frame in receive(self, now, received)]

    monkeypatch.setattr(atp_core.ServerHostCore, "receive", wrong)
    assert sweep(tmp_path / "run", "methods=[atp]") == run_experiment.EXIT_NOT_VERIFIED


def train(out: Path, *overrides: str) -> int:
    """configs/training_convergence.yaml (the MLP on digits, checked against the runner's replay)
    for three steps: its pool of 16 aggregators takes a window of at most 16."""
    return run(CONFIG_DIR / "training_convergence.yaml", out, "workload.steps=3", "protocol.atp.window=16", *overrides)


def test_an_atp_training_is_verified_step_by_step_with_atps_own_sums(tmp_path: Path) -> None:
    """Every step's all-reduce checked against ATP's own exact sum (its job-wide scale), as a
    sweep's are; the training holds exactly the replay's parameters."""
    assert train(tmp_path / "run", "methods=[switchml,atp]") == run_experiment.EXIT_OK
    steps = pd.read_csv(tmp_path / "run" / "training_steps.csv")
    atp = steps[(steps["method"] == "atp") & (steps["source"] != "offline")]
    assert list(atp["step"]) == [0, 1, 2, 3] and atp["verified"].all()


def test_a_wrong_atp_sum_in_a_training_step_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The PS adding one to the last value of every result: each step's integer sum differs
    from ATP's own, and says so (not merely "no expected sum")."""
    receive = atp_core.ServerHostCore.receive

    def wrong(self, now: float, received):
        return [frame[:-1] + bytes([(frame[-1] + 1) & 0xFF]) for frame in receive(self, now, received)]

    monkeypatch.setattr(atp_core.ServerHostCore, "receive", wrong)
    assert train(tmp_path / "run", "methods=[atp]") == run_experiment.EXIT_NOT_VERIFIED
    steps = pd.read_csv(tmp_path / "run" / "training_steps.csv")
    assert not steps[(steps["method"] == "atp") & (steps["step"] > 0)]["verified"].any()
    assert "atp step 1 rank 0: NOT VERIFIED: integer sum: " in caplog.text


def test_a_window_beyond_the_pool_is_refused_as_the_config_loads(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A window of 64 named in a config of 16 aggregators: one line naming both, before anything
    runs (where a config names none, the window is the pool's)."""
    assert run(CONFIG_DIR / "training_convergence.yaml", tmp_path / "run", "methods=[atp]", "protocol.atp.window=64") == run_experiment.EXIT_CONFIG
    assert "training_convergence.yaml: protocol.atp.window must be 1..pool_size (16), got 64" in caplog.text
    assert not (tmp_path / "run").exists()


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Every ATP switch and PS the run builds, to read what they counted."""
    made: dict[str, list] = {"switches": [], "servers": []}
    for cls, key in ((ATPSwitch, "switches"), (atp_core.ServerHostCore, "servers")):
        init = cls.__init__

        def recording(self, *args, init=init, key=key, **kwargs) -> None:
            init(self, *args, **kwargs)
            made[key].append(self)

        monkeypatch.setattr(cls, "__init__", recording)
    return made


SHARED_POOL = """
name: atp_shared_pool
description: four ATP jobs hashing into one pool of 8 aggregators
topology: {file: star.yaml, workers: 8, link: {bw_mbps: 5, delay_ms: 0, loss: 0, queue_packets: 200}}
switch: {target: embedded, max_pool_size: 64}
protocol: {k: 256, timeout_ms: 20, atp: {window: 8, ecn_threshold: 2}}
workload: {kind: synthetic, elements: 16384, dtype: float32, seed: 1}
methods: [atp]
repetitions: 2
jobs:
  - {job_id: 11, hosts: [0, 1], pool_size: 8, start_s: 0}
  - {job_id: 12, hosts: [2, 3], pool_size: 8, elements: 8192, start_s: 0.005}
  - {job_id: 13, hosts: [4, 5], pool_size: 8, start_s: 0.01}
  - {job_id: 14, hosts: [6, 7], pool_size: 8, elements: 8192, start_s: 0}
"""


def test_atp_jobs_sharing_one_pool_collide_and_stay_exact(tmp_path: Path, built: dict[str, list]) -> None:
    config = tmp_path / "shared.yaml"
    config.write_text(SHARED_POOL)
    assert run(config, tmp_path / "run") == 0
    jobs = pd.read_csv(tmp_path / "run" / "jobs.csv")
    assert sorted(jobs["job_id"].unique()) == [11, 12, 13, 14] and jobs["verified"].all() and len(jobs) == 2 * 8
    [events] = [e for e in (read_event_counters(s.control()) for s in built["switches"]) if e["EGV_SENT"]]  # the run's, not a check's
    assert events["EV_COLLISION_TO_PS"] > 0, "jobs hashing into 8 aggregators collide"
    assert events["EGV_ECN_MARKED"] > 0, "collisions queue at the PS's port, which ECN marks"
    assert len(built["servers"]) == 4, "each job its own PS on its own host"
    assert sum(server.core.stats.collided_sequences for server in built["servers"]) > 0
    assert sum(server.core.stats.partial_sums for server in built["servers"]) > 0


def worker_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *settings: str) -> list[list[tuple[float, float]]]:
    """SHARED_POOL on the simulated clock: per ATP worker, each step's time and the hold it then asked for."""
    steps: dict[int, list[tuple[float, float]]] = {}
    step = atp_core.WorkerHostCore.step

    def recording(self, now, received):  # type: ignore[no-untyped-def]
        out = step(self, now, received)
        steps.setdefault(id(self), []).append((now, self.hold_s))
        return out

    monkeypatch.setattr(atp_core.WorkerHostCore, "step", recording)
    config = tmp_path / "shared.yaml"
    config.write_text(SHARED_POOL)
    assert run(config, tmp_path / "run", *settings) == 0
    return list(steps.values())


def held(steps: list[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """(time to the next step, hold asked for) after every step that asked for a hold."""
    return [(rank[i + 1][0] - now, hold) for rank in steps for i, (now, hold) in enumerate(rank[:-1]) if hold]


def test_a_simulated_worker_holds_after_a_small_batch_as_its_socket_loop_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a shaped link the socket loop sleeps ``WorkerCore.hold_s`` after a small batch of
    results (hosts/atp/client.py, worker.c); with ``simulation.worker_holds`` the simulated
    worker sleeps as long, taking nothing until the hold is over."""
    holds = held(worker_steps(tmp_path, monkeypatch, "simulation.worker_holds=true"))
    assert holds, "small batches on a shaped link hold"
    window_on_link_s = 8 * 8 * frame_bytes(256) / 5e6  # window 8 at 5 Mbit/s
    assert max(hold for _, hold in holds) == pytest.approx(min(HOLD_SHARE * window_on_link_s, HOLD_MAX_S)), "half the window's time on the link"
    assert all(gap >= hold - 1e-12 for gap, hold in holds), "the driver hands the core nothing during a hold"


def test_an_ideal_simulated_host_takes_every_result_as_it_arrives(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By default (an ideal host, as at the paper's scale) the core still says how long its loop
    would hold, and the driver does not: some step follows a hold's ask sooner than the hold."""
    holds = held(worker_steps(tmp_path, monkeypatch))
    assert holds and any(gap < hold for gap, hold in holds)


@pytest.mark.parametrize(("requested", "mechanism"), [("auto", "simulated_link_loss"), ("switch", "switch_drop_simulator")])
def test_atp_on_lossy_links_resends_and_stays_exact(tmp_path: Path, requested: str, mechanism: str) -> None:
    """Loss on the links themselves, or from the switch program's drop simulator as emulation
    without netem has it (``loss_mechanism: switch``), which ATP's program has too."""
    assert sweep(tmp_path / "run", "methods=[atp]", "topology.link.loss=0.01", f"loss_mechanism={requested}") == 0
    runs = pd.read_csv(tmp_path / "run" / "runs.csv")
    assert runs["verified"].all() and runs["retransmissions"].sum() > 0
    assert set(runs["loss_mechanism"]) == {mechanism}
    own = pd.read_csv(tmp_path / "run" / "protocol_counters.csv")
    workers = counts(own, role="worker")
    assert workers["resends_gap"] + workers["resends_timeout"] == runs["retransmissions"].sum()
    switch = counts(pd.read_csv(tmp_path / "run" / "switch_counters.csv"))
    assert switch["EV_RESEND_FLUSHED"] + switch["EV_RESEND_PASSED"] > 0, "the switch took the resends"
    assert counts(own, role="server")["partial_sums"] > 0, "the PS finished what loss left partial"
    dropped = switch["EV_DROP_SIM_INGRESS"] + switch["EGV_DROP_SIM_EGRESS"]
    assert dropped > 0 if mechanism == "switch_drop_simulator" else dropped == 0


def test_a_tree_is_refused_in_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """ATP's program aggregates at the switch its workers are cabled to: a leaf would drop their packets."""
    assert run(CONFIG_DIR / "hierarchical.yaml", tmp_path / "run", "switch.target=embedded", "methods=[atp]", "repetitions=1") == 2
    [line] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "ATP's jobs run on a star" in line and "leaves s2, s3" in line
