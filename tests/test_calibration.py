"""Link rates measured on the user's machine (experiments/calibration/): the calibration
file's format, which of its entries a config's ``bw_mbps: target`` gets, and that the run's
header and summary.json name the file (or "shipped"). The measurement itself is a search of
capacity probes (tests/test_emulation_capacity.py); one tiny real calibration is at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from base.yamlschema import ConfigError
from experiments.calibration import measure, record
from experiments.config import CONFIG_DIR, load_experiment
from protocol import results_format as fmt
from protocol.params import REPO_ROOT
from switches.targets import REGISTRY
from tests.experiment_runs import NETWORK_WAIT_S, leftovers

MAIN_CONFIG = CONFIG_DIR / "8workers.yaml"
WORKERS_CONFIG = CONFIG_DIR / "ate_vs_workers.yaml"  # a sweep over 2, 4 and 8 workers


def entry(target: str = "embedded", k: int = 256, workers: int = 8, rate: float | None = 9.3, data_path: str = "auto") -> dict[str, Any]:
    return {"target": target, "k": k, "workers": workers, "data_path": data_path,
            "capacity_mbps": None if rate is None else round(rate / (1 - measure.MARGIN), 2), "rate_mbps": rate,
            "mode": "quick", "measured_utc": "2026-12-06T07:00:00+00:00", "load_before": [1.5, 1.2, 1.0],
            "probes": [{"link_mbps": 12.4, "attempt": 1, "keeps_up": True, "share_of_bound": 0.97, "kept_up": True, "verified": True}]}


@pytest.fixture
def calibration(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The calibration file this test's processes read (none written yet)."""
    path = tmp_path / "calibration.yaml"
    monkeypatch.setenv(record.FILE_VARIABLE, str(path))
    return path


def written(path: Path, *entries: dict[str, Any]) -> Path:
    record.write(path, record.merged(None, entries, measure.MARGIN, "2026-12-06T07:05:00+00:00"))
    return path


def test_the_file_reads_back_what_was_written_and_a_user_can_read_it(calibration: Path) -> None:
    written(calibration, entry(), entry(k=64, rate=4.2))
    text = calibration.read_text()
    assert text.startswith("# Link rates this machine keeps up with") and "rate_mbps: 9.3" in text
    data = record.read(calibration)
    assert data["machine"] == record.this_machine() and data["margin"] == measure.MARGIN
    assert [(e["k"], e["rate_mbps"]) for e in data["rates"]] == [(64, 4.2), (256, 9.3)]  # sorted by target, k, workers
    assert not calibration.with_name("calibration.yaml.partial").exists()


def test_a_damaged_file_is_named_with_its_key(calibration: Path) -> None:
    written(calibration, entry())
    calibration.write_text(calibration.read_text().replace("rate_mbps: 9.3", "rate_mbps: -1"))
    with pytest.raises(ConfigError, match=r"calibration.yaml \(the calibration file: .*\): rates\[0\].rate_mbps: -1"):
        record.read(calibration)
    with pytest.raises(ConfigError, match="calibration file"):
        load_experiment(MAIN_CONFIG, ["switch.target=embedded"])


def test_a_new_search_replaces_its_entry_and_keeps_the_others(calibration: Path) -> None:
    written(calibration, entry(workers=8, rate=9.3), entry(workers=4, rate=12.0))
    again = record.merged(record.read(calibration), [entry(workers=8, rate=6.0)], measure.MARGIN, "later")
    assert [(e["workers"], e["rate_mbps"]) for e in again["rates"]] == [(4, 12.0), (8, 6.0)]
    elsewhere = record.read(calibration) | {"machine": {**record.this_machine(), "host": "another-host"}}
    assert [e["workers"] for e in record.merged(elsewhere, [entry(workers=8)], measure.MARGIN, "later")["rates"]] == [8]
    other_margin = record.read(calibration) | {"margin": 0.5}
    assert len(record.merged(other_margin, [entry(workers=8)], measure.MARGIN, "later")["rates"]) == 1


def test_the_entry_with_the_fewest_workers_no_fewer_than_the_runs_is_used(calibration: Path) -> None:
    assert record.find_rate("embedded", 256, 8, "auto") == record.Lookup(None)  # no file: no calibration, nothing to say
    written(calibration, entry(workers=4, rate=12.0), entry(workers=8, rate=9.3), entry(workers=16, rate=3.1))
    assert record.find_rate("embedded", 256, 2, "auto").rate.mbps == 12.0  # type: ignore[union-attr]
    assert record.find_rate("embedded", 256, 5, "auto").rate.mbps == 9.3  # type: ignore[union-attr]
    assert record.find_rate("embedded", 256, 16, "auto").rate.mbps == 3.1  # type: ignore[union-attr]
    for target, k, workers, data_path in [("embedded", 256, 17, "auto"), ("embedded", 64, 8, "auto"), ("ebpf", 256, 8, "auto"),
                                          ("embedded", 256, 8, "python"), ("embedded", 256, None, "auto")]:
        found = record.find_rate(target, k, workers, data_path)
        assert found.rate is None and found.why_not is not None and str(calibration) in found.why_not, (target, k, workers, data_path)


def test_a_file_from_another_machine_or_a_failed_search_gives_no_rate(calibration: Path) -> None:
    written(calibration, entry(rate=None))
    assert "kept up at none of the rates tried" in (record.find_rate("embedded", 256, 8, "auto").why_not or "")
    data = record.read(calibration) | {"machine": {**record.this_machine(), "cpus": 64}}
    calibration.write_text(json.dumps(data))  # JSON is YAML
    assert "another machine" in (record.find_rate("embedded", 256, 8, "auto").why_not or "")


def test_bw_mbps_target_runs_at_the_calibrated_rate_and_says_where_it_came_from(calibration: Path) -> None:
    shipped = REGISTRY["embedded"].link_mbps(256)
    plain = load_experiment(MAIN_CONFIG, ["switch.target=embedded"])
    assert {p.topology.link_mbps for p in plain.points} == {shipped}
    assert plain.link_rate_source == "shipped SwitchTarget.link_rates of embedded at k = 256"
    written(calibration, entry(workers=8, rate=9.3), entry(workers=4, rate=12.0))
    calibrated = load_experiment(MAIN_CONFIG, ["switch.target=embedded"])
    assert {p.topology.link_mbps for p in calibrated.points} == {9.3}
    assert calibrated.link_rate_source.startswith(f"calibration {calibration}: embedded at k = 256 for 8 workers")
    # a sweep over 2, 4 and 8 workers runs every point at the rate its most workers keep up with
    swept = load_experiment(WORKERS_CONFIG, ["switch.target=embedded"])
    assert {p.topology.link_mbps for p in swept.points} == {9.3}
    assert load_experiment(MAIN_CONFIG, ["switch.target=embedded", "topology.workers=4"]).points[0].topology.link_mbps == 12.0
    # only some points covered (16 workers): the shipped rate, and why
    more = load_experiment(MAIN_CONFIG, ["switch.target=embedded", "topology.workers=16"])
    assert more.points[0].topology.link_mbps == shipped
    assert more.link_rate_source == (f"shipped SwitchTarget.link_rates of embedded at k = 256; {calibration} has no entry for "
                                     "embedded at k = 256, data_path auto, for 16 workers or more")
    # auto: the rate of the target it resolves to
    assert load_experiment(MAIN_CONFIG).with_target("embedded").points[0].topology.link_mbps == 9.3
    # an explicit rate still wins
    assert load_experiment(MAIN_CONFIG, ["switch.target=embedded", "topology.link.bw_mbps=3"]).points[0].topology.link_mbps == 3


def test_a_calibrated_k_needs_no_shipped_rate(calibration: Path) -> None:
    assert 128 not in REGISTRY["embedded"].link_rates
    with pytest.raises(ConfigError, match="run_experiment.py --calibrate"):
        load_experiment(MAIN_CONFIG, ["switch.target=embedded", "protocol.k=128"])
    written(calibration, entry(k=128, rate=8.1))
    assert load_experiment(MAIN_CONFIG, ["switch.target=embedded", "protocol.k=128"]).points[0].topology.link_mbps == 8.1


def test_margin_keeps_three_quarters_rounded_down_to_two_digits() -> None:
    assert [measure.with_margin(c) for c in (10.0, 2.0, 13.0, 0.9, 160.0)] == [7.5, 1.5, 9.7, 0.67, 120.0]


def test_quick_measures_what_the_config_runs_and_full_every_k_and_worker_count() -> None:
    swept = load_experiment(WORKERS_CONFIG, ["switch.target=embedded"])
    quick = measure.plan(swept, measure.MODES["quick"], ["embedded"])
    assert [(s.target, s.k, s.workers, s.start_mbps) for s in quick] == [("embedded", 256, 8, REGISTRY["embedded"].link_mbps(256))]
    full = measure.plan(swept, measure.MODES["full"], ["embedded", "bmv2"])
    assert {(s.target, s.k, s.workers) for s in full} == {(t, k, w) for t in ("embedded", "bmv2") for k in REGISTRY[t].k_choices or (32, 64, 128, 256)
                                                           for w in (2, 4, 8)}
    assert measure.most_runs(quick, measure.MODES["quick"]) < measure.most_runs(full, measure.MODES["full"])


def run_experiment(*args: str, env_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO_ROOT / "run_experiment.py"), *args], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL, env=os.environ | {record.FILE_VARIABLE: str(env_file)}, check=False)


def test_the_header_names_the_calibration_and_a_dry_calibration_its_plan(calibration: Path) -> None:
    written(calibration, entry())
    header = run_experiment(str(MAIN_CONFIG), "--switch", "embedded", "--dry-run", env_file=calibration)
    assert header.returncode == 0 and f"9.3 Mbit/s links (from calibration {calibration}: embedded at k = 256 for 8 workers" in header.stdout, header.stderr
    plan = run_experiment("--calibrate", "quick", "--switch", "embedded", "--dry-run", env_file=calibration)
    assert plan.returncode == 0, plan.stderr
    assert f"into {calibration}: 1 search, at most" in plan.stdout and "embedded, k = 256, 8 workers (from 9.3 Mbit/s)" not in plan.stdout
    assert "embedded, k = 256, 8 workers (from 7.5 Mbit/s)" in plan.stdout  # a search starts from the shipped rate
    own_rate = run_experiment(str(CONFIG_DIR / "ate_vs_workers_16.yaml"), "--calibrate", "quick", "--switch", "embedded", "--dry-run",
                              env_file=calibration)
    assert own_rate.returncode == 0 and "runs at a rate of its own (topology.link.bw_mbps) and will not use the calibration" in own_rate.stderr
    clash = run_experiment("--calibrate", "quick", "--simulate", env_file=calibration)
    assert clash.returncode == 2 and "--simulate does not apply" in clash.stderr
    calibration.write_text("format: 2\n")
    damaged = run_experiment("--calibrate", "quick", "--switch", "embedded", "--dry-run", env_file=calibration)
    assert damaged.returncode == 2 and "the calibration file" in damaged.stderr and "Traceback" not in damaged.stderr


def test_summary_json_records_the_calibrated_rate(calibration: Path, tmp_path: Path) -> None:
    written(calibration, entry())
    out = tmp_path / "run"
    done = run_experiment(str(MAIN_CONFIG), "--simulate", "--switch", "embedded", "--set", "methods=[switchml]", "--set", "workload.elements=4096",
                          "--set", "repetitions=1", "--out", str(out), env_file=calibration)
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / fmt.SUMMARY_FILE).read_text())
    assert summary["link_mbps"] == 9.3 and summary["link_mbps_source"].startswith(f"calibration {calibration}: embedded at k = 256")
    assert summary[fmt.PROVENANCE_KEY]["link_rate"] == {"mbps": 9.3, "source": summary["link_mbps_source"]}


@pytest.mark.slow
@pytest.mark.mininet
def test_a_tiny_calibration_writes_an_entry_the_next_run_uses(calibration: Path) -> None:
    """One target, one k, 2 workers, quick: the file it writes sets the next load's rate."""
    if os.geteuid() != 0:
        pytest.skip("the probes start Mininet: needs root")
    done = subprocess.run([sys.executable, str(REPO_ROOT / "run_experiment.py"), "--calibrate", "quick", "--switch", "embedded",
                           "--set", "topology.workers=2"], capture_output=True, text=True, timeout=NETWORK_WAIT_S + 900,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    [measured] = record.read(calibration)["rates"]
    assert (measured["target"], measured["k"], measured["workers"], measured["mode"]) == ("embedded", 256, 2, "quick")
    assert measured["probes"] and all(not leftovers(p["run_dir"]) for p in measured["probes"])
    kept = [p["link_mbps"] for p in measured["probes"] if p["keeps_up"]]
    assert measured["capacity_mbps"] == (max(kept) if kept else None)
    if measured["rate_mbps"] is not None:
        assert load_experiment(MAIN_CONFIG, ["switch.target=embedded", "topology.workers=2"]).points[0].topology.link_mbps == \
            measured["rate_mbps"]


def test_each_search_is_written_as_it_ends(calibration: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupted calibration keeps the searches that ended: the file is merged after each."""
    searches = [measure.Search("embedded", 256, workers, "auto", 7.5) for workers in (2, 4, 8)]

    def measured(search: measure.Search, *args: object) -> dict[str, Any]:
        if search.workers == 8:
            raise KeyboardInterrupt
        return entry(workers=search.workers, rate=float(search.workers))

    monkeypatch.setattr(measure, "measure", measured)
    written(calibration, entry(target="ebpf", workers=8, rate=10.0))
    ended: list[dict[str, object]] = []
    with pytest.raises(KeyboardInterrupt):
        measure.calibrate(searches, measure.MODES["quick"], calibration, tmp_path, print, print, ended.append)
    assert [(e["target"], e["workers"], e["rate_mbps"]) for e in record.read(calibration)["rates"]] == [
        ("ebpf", 8, 10.0), ("embedded", 2, 2.0), ("embedded", 4, 4.0)]
    assert [e["workers"] for e in ended] == [2, 4]
