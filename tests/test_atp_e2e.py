"""ATP beside SwitchML through Mininet, end to end: ``run_experiment.py`` on a real network.

One network, both protocols: SwitchML's job first, then the network loads ATP's program on
the switch, starts the job's parameter server on the server host it cabled for it (srv1),
and runs ATP's workers, each rank a process on its host. Every job must verify (ATP's own
exact integer sum), the PS must have finished every chunk the switch sent it, and the
switch's counters must show ATP's aggregation (results_format: switch_counters.csv). Once per
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

N_WORKERS, K, ELEMENTS = 4, 256, 16384
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
    settings = [f"topology.workers={N_WORKERS}", "methods=[switchml,atp]", "repetitions=1", f"workload.elements={ELEMENTS}",
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
    # every chunk summed by the switch from all workers and finished once by the PS
    switch = counts(pd.read_csv(out / "switch_counters.csv"), method="atp")
    assert switch["EV_AGGREGATED"] >= PACKETS * (N_WORKERS - 1)
    assert switch["EV_FULL_TO_PS"] + switch["EV_RESEND_FLUSHED"] >= PACKETS
    assert switch["EV_RESULT_FREED"] == PACKETS
    ps_log = (out / "logs" / "point0" / "srv1.log").read_text()
    [stopped] = [line for line in ps_log.splitlines() if "parameter server stopped" in line]
    ps = json.loads(stopped.split("stopped: ", 1)[1])
    assert ps["core"]["full_sums"] + ps["core"]["sequences_from_parts"] >= PACKETS and ps["malformed"] == 0
