"""ATP beside SwitchML through Mininet, end to end: ``run_experiment.py`` on a real network.

One network, both protocols: SwitchML's job first, then the network loads ATP's program on
the switch, starts the job's parameter server on the server host it cabled for it (srv1),
and runs ATP's workers, each rank a process on its host. Every job must verify (ATP's own
exact integer sum), the PS must have finished every chunk of each job once (its counts, per
job, in protocol_counters.csv as on the simulated clock), and the switch's counters must show
ATP's aggregation (results_format: switch_counters.csv). Once per
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


def test_link_loss_is_refused_where_neither_netem_nor_atps_program_can_drop(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """On a kernel without netem, link loss is the switch program's drop simulator, which
    ATP's program has not: the run stops before any job, naming why, rather than measure ATP
    on lossless links under a lossy config."""
    if os.geteuid() != 0:
        pytest.skip("Mininet needs root")
    from network.shaping import probe_tc

    if probe_tc().netem:
        pytest.skip("this kernel has netem: ATP's links lose packets there")
    out = tmp_path / "run"
    settings = ["topology.workers=2", "methods=[atp]", "repetitions=1", f"workload.elements={K}", "topology.link.loss=1%"]
    code = run_experiment.main([str(CONFIG_DIR / "8workers.yaml"), "--switch", "embedded", "--out", str(out),
                                *(arg for setting in settings for arg in ("--set", setting))])
    assert code == run_experiment.EXIT_FAILED
    assert "link loss needs netem, which this kernel lacks, or the switch's drop simulator, which ATP's program has not" in caplog.text
    assert not (out / "runs.csv").exists()
