"""The simulated clock is protocol-neutral: a protocol registered with its record, its
sans-IO worker core and its embedded program runs a verified job through
``run_experiment.py --simulate``, its host side its own (docs/simulation.md, "Another protocol").

Toy sum (tests/toy_aggregation.py) is registered in temporary registries, as
tests/test_plugins.py registers it, and run by the runner end to end: the config, the
checks of what the simulated clock runs, the sweep kind on the one network interface
(experiments/harness.py), the toy's worker under the generic driver (simulation/host.py),
its program on the simulated embedded switch programmed by its record's ``program_fabric``,
and the verifier.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

import methods
import run_experiment
import switches.embedded
from experiments.config import CONFIG_DIR
from switches import targets
from tests import toy_aggregation as toy

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

N_WORKERS, K, ELEMENTS = 3, 32, 320


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """Toy sum registered as tests/test_plugins.py registers it: its record, its method, its embedded program."""
    embedded = targets.REGISTRY["embedded"]
    monkeypatch.setattr(methods, "AGGREGATIONS", (*methods.AGGREGATIONS, toy.AGGREGATION))
    monkeypatch.setattr(methods, "REGISTRY", (*methods.REGISTRY, toy.METHOD))
    monkeypatch.setitem(switches.embedded.SIMULATED_PROGRAMS, toy.NAME, "tests.toy_aggregation:ToySwitch")
    monkeypatch.setitem(targets.REGISTRY, "embedded", replace(embedded, protocols=embedded.protocols | {toy.NAME}))


def toy_run(out: Path, *overrides: str) -> int:
    settings = ["switch.target=embedded", f"methods=[{toy.NAME}]", f"topology.workers={N_WORKERS}", f"protocol.k={K}",
                "protocol.pool_size=4", "topology.link.bw_mbps=10", "repetitions=2",
                f"workload={{kind: synthetic, elements: {ELEMENTS}, dtype: int32}}", *overrides]
    return run_experiment.main([str(CONFIG_DIR / "8workers.yaml"), "--simulate", "--out", str(out),
                                *(arg for setting in settings for arg in ("--set", setting))])


def test_a_registered_protocol_runs_a_verified_job_on_the_simulated_clock(registered: None, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    built = []
    monkeypatch.setattr(toy.ToyWorker, "__init__", record_built(toy.ToyWorker.__init__, built))
    assert toy_run(tmp_path / "run") == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["simulated"] and summary["verified"]
    assert summary["network"]["0"]["data_plane"] == "embedded"
    assert "Toy sum's worker core on the simulated clock" in summary["data_path"]["reason"]
    runs = pd.read_csv(tmp_path / "run" / "runs.csv")
    assert list(runs["method"].unique()) == [toy.NAME] and len(runs) == 2 * N_WORKERS and runs["verified"].all()
    # each rank sent its 10 chunks once and got their 10 sums, in 10 frames' time at 10 Mbit/s and more
    assert (runs["packets_sent"] == ELEMENTS // K).all() and (runs["packets_received"] == ELEMENTS // K).all()
    assert (runs["tat_s"] >= ELEMENTS // K * 8 * (14 + 8 + 4 * K) / 10e6).all()
    assert built == list(range(N_WORKERS)), "each rank's worker is the toy's own, built from its spec"


def record_built(init, built: list[int]):
    def recording(self, spec, rank: int) -> None:
        built.append(rank)
        init(self, spec, rank)

    return recording


def test_a_protocol_whose_sums_come_back_wrong_fails_verification(registered: None, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The same run with the toy switch adding one to every sum: the verifier sees it (EXIT_NOT_VERIFIED)."""
    connect = toy.ToySwitch.connect
    monkeypatch.setattr(toy.ToySwitch, "connect", lambda self, port, transmit: connect(self, port, lambda data: transmit(bump(data))))
    assert toy_run(tmp_path / "run") == run_experiment.EXIT_NOT_VERIFIED


def bump(data: bytes) -> bytes:
    """A toy result frame with its first value one more."""
    job, rank, n, chunk, values = toy.parse(data, K)
    values = values.copy()
    values[0] += 1
    return toy.frame(job, rank, n, chunk, values)


def test_a_protocol_without_a_core_is_refused_in_one_line(registered: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    coreless = replace(toy.AGGREGATION, core=None)
    monkeypatch.setattr(methods, "AGGREGATIONS", (*methods.AGGREGATIONS[:-1], coreless))
    monkeypatch.setattr(methods, "REGISTRY", (*methods.REGISTRY[:-1], replace(toy.METHOD, aggregation=coreless)))
    assert toy_run(tmp_path / "run") == 2
    assert "Toy sum has no worker on the simulated clock (its record names no core)" in caplog.text


def test_a_protocol_job_that_misses_its_deadline_fails_the_run_in_one_line(registered: None, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch,
                                                                           caplog: pytest.LogCaptureFixture) -> None:
    """The generic driver stops a job at the spec's deadline, in simulated seconds: a switch that
    answers nothing fails the run naming the protocol and the rank (EXIT_FAILED), not a hang."""
    monkeypatch.setattr(toy.ToySwitch, "receive", lambda self, port, data: None)
    assert toy_run(tmp_path / "run", "limits.job_timeout_s=2") == run_experiment.EXIT_FAILED
    [line] = [record.getMessage() for record in caplog.records if record.levelname == "ERROR"]
    assert f"point 0 {toy.NAME} rep 0 (simulated): Toy sum rank 0: no result after 2 s (simulated)" in line
