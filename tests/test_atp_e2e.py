"""ATP beside SwitchML through Mininet, end to end: ``run_experiment.py`` on a real network.

One network, both protocols: SwitchML's job first, then the network loads ATP's program on
the switch, starts the job's parameter server on the server host it cabled for it (srv1),
and runs ATP's workers, each rank a process on its host. Every job must verify (ATP's own
exact integer sum), the PS must have finished every chunk of each job once (its counts, per
job, in protocol_counters.csv as on the simulated clock), and the switch's counters must show
ATP's aggregation (results_format: switch_counters.csv). With link loss emulated by the
switch's drop simulator, both protocols verify and the drops are counted. Once per
target that runs here: the embedded switch always, eBPF and bmv2 where they load (skipped,
saying why, where not).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

import run_experiment
from experiments.config import CONFIG_DIR
from tests.conftest import require_target

pytestmark = pytest.mark.mininet

N_WORKERS, K, ELEMENTS, REPETITIONS = 4, 256, 16384, 2
PACKETS = ELEMENTS // K


def counts(table: pd.DataFrame, **where: object) -> dict[str, int]:
    for column, value in where.items():
        table = table[table[column] == value]
    return table.groupby("counter")["value"].sum().to_dict()


@pytest.mark.parametrize("target", ["embedded", pytest.param("ebpf", marks=pytest.mark.ebpf), pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_atp_runs_verified_beside_switchml_through_mininet(target: str, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("Mininet needs root")
    require_target(target)
    out = tmp_path / "run"
    settings = [f"topology.workers={N_WORKERS}", "methods=[switchml,atp]", f"repetitions={REPETITIONS}", f"workload.elements={ELEMENTS}",
                f"protocol.k={K}"]
    code = run_experiment.main([str(CONFIG_DIR / "8workers.yaml"), "--switch", target, "--out", str(out),
                                *(arg for setting in settings for arg in ("--set", setting))])
    assert code == 0
    assert json.loads((out / "summary.json").read_text())["verified"]
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["method"].unique()) == ["atp", "switchml"] and runs["verified"].all()
    # the PS's host: cabled to the aggregating switch, addressed from the top of the subnet
    servers = json.loads((out / "network.json").read_text())["0"]["server_hosts"]
    assert list(servers) == ["srv1"]
    own = pd.read_csv(out / "protocol_counters.csv")
    for repetition in range(REPETITIONS):
        # every chunk summed by the switch from all workers and finished once by the PS, in each job
        switch = counts(pd.read_csv(out / "switch_counters.csv"), method="atp", repetition=repetition)
        assert switch["EV_AGGREGATED"] >= PACKETS * (N_WORKERS - 1)
        assert switch["EV_FULL_TO_PS"] + switch["EV_RESEND_FLUSHED"] >= PACKETS
        assert switch["EV_RESULT_FREED"] == PACKETS
        # the PS's counts over that job alone (not since it started), one server, as the simulated clock records them
        server = own[(own["method"] == "atp") & (own["role"] == "server") & (own["repetition"] == repetition)]
        assert set(server["index"]) == {0}
        ps = counts(server)
        assert ps["sequences_from_switch"] + ps["sequences_from_parts"] == PACKETS, ps
        assert ps["full_sums"] >= ps["sequences_from_switch"] and ps["results_sent"] >= PACKETS and ps["malformed"] == 0


LOSSY_WORKERS, LOSSY_ELEMENTS, LOSS = 3, 32768, 0.01
"""A small lossy job: 128 packets per worker, each of which crosses the switch about eight
times (in, to the PS, the PS's result in, a copy out per worker), so ~10 frames are lost at 1 %
on average and the chance of none is e^-10."""


@pytest.mark.parametrize("target", ["embedded", pytest.param("ebpf", marks=pytest.mark.ebpf), pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_atp_verifies_beside_switchml_through_the_switchs_drop_simulator(target: str, tmp_path: Path) -> None:
    """Link loss emulated by the switch program's drop simulator (``loss_mechanism: switch``,
    what a kernel without netem gets): ATP's program drops and counts as SwitchML's does, and
    both jobs still verify exactly; the summary names the mechanism."""
    if os.geteuid() != 0:
        pytest.skip("Mininet needs root")
    require_target(target)
    out = tmp_path / "run"
    settings = [f"topology.workers={LOSSY_WORKERS}", "methods=[switchml,atp]", "repetitions=1", f"workload.elements={LOSSY_ELEMENTS}",
                f"protocol.k={K}", f"topology.link.loss={LOSS}", "loss_mechanism=switch"]
    code = run_experiment.main([str(CONFIG_DIR / "8workers.yaml"), "--switch", target, "--out", str(out),
                                *(arg for setting in settings for arg in ("--set", setting))])
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] and summary["loss"] == LOSS and summary["loss_mechanism"] == "switch_drop_simulator"
    runs = pd.read_csv(out / "runs.csv")
    assert sorted(runs["method"].unique()) == ["atp", "switchml"] and runs["verified"].all()
    counters = pd.read_csv(out / "switch_counters.csv")
    for method in ("switchml", "atp"):
        switch = counts(counters, method=method)
        assert switch["EV_DROP_SIM_INGRESS"] + switch["EGV_DROP_SIM_EGRESS"] > 0, f"{method}: nothing was lost"
    ps = counts(pd.read_csv(out / "protocol_counters.csv"), method="atp", role="server")
    assert ps["sequences_from_switch"] + ps["sequences_from_parts"] == LOSSY_ELEMENTS // K, ps
