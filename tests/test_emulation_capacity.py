"""The capacity probe (experiments/capacity.py): its search, which methods the benchmark
measures on which target, and real probes' rows of benchmarks/emulation_capacity.py's table."""

from __future__ import annotations

import csv
import dataclasses
import os
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest

import methods
from benchmarks import emulation_capacity
from benchmarks.emulation_capacity import IN_NETWORK, pairs
from experiments.capacity import Probe, Prober, ProbeSettings, most_probes, probe_elements, search
from protocol.params import REPO_ROOT
from switches.targets import REGISTRY
from tests.experiment_runs import NETWORK_WAIT_S, leftovers


@pytest.mark.parametrize(
    ("capacity", "found", "tried"),
    [
        (12.0, 10.0, [2.5, 5.0, 10.0, 20.0, 15.0, 12.5]),  # doubling brackets 10-20, two midpoints
        (13.0, 12.5, [2.5, 5.0, 10.0, 20.0, 15.0, 12.5]),
        (1.0, 0.938, [2.5, 1.25, 0.625, 0.938, 1.09]),  # halving from a start that does not keep up
        (0.1, None, [2.5, 1.25, 0.625, 0.3125]),  # nothing down to the floor keeps up
        (1000.0, 160.0, [2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0]),  # everything up to the ceiling keeps up
    ],
)
def test_search_brackets_then_bisects(capacity: float, found: float | None, tried: list[float]) -> None:
    probed: list[float] = []

    def keeps_up(rate: float) -> bool:
        probed.append(rate)
        return rate <= capacity

    assert search(keeps_up, start=2.5, floor=0.25, ceiling=160.0, bisections=2) == found
    assert probed == tried
    assert len(tried) <= most_probes(start=2.5, floor=0.25, ceiling=160.0, bisections=2)  # a progress bar's total bounds it


def test_the_most_probes_is_reached() -> None:
    """The bound is tight: a capacity just under the ceiling's last doubling tries every rate it counts."""
    probed: list[float] = []
    search(lambda rate: probed.append(rate) or rate <= 300.0, start=2.5, floor=0.25, ceiling=320.0, bisections=3)
    assert len(probed) == most_probes(start=2.5, floor=0.25, ceiling=320.0, bisections=3)


@pytest.mark.parametrize("method", IN_NETWORK, ids=lambda method: method.name)
def test_probe_jobs_hold_the_same_seconds_of_data_at_every_rate(method: methods.Method) -> None:
    for k in (32, 256):
        slow, fast = probe_elements(method, 2.5, 2.0, 0, k, 8), probe_elements(method, 10.0, 2.0, 0, k, 8)
        assert slow % k == 0 and fast % k == 0  # whole packets
        assert fast / slow == pytest.approx(4, rel=1e-2)
        assert slow == pytest.approx(2.0 * method.bound(2.5e6, 8, k), abs=k)  # two seconds at the method's own line rate
        assert probe_elements(method, 2.5, 2.0, at_least_packets=10 * slow // k, k=k, workers=8) == 10 * slow  # never fewer packets than the config's
    assert probe_elements(method, 0.1, 2.0, at_least_packets=4096, k=256, workers=8) == 4096 * 256  # the main job's packets, whatever k


def test_the_benchmark_measures_every_in_network_method_each_target_runs() -> None:
    assert {method.name for method in IN_NETWORK} == {protocol.name for protocol in methods.AGGREGATIONS}  # SwitchML and ATP
    measured, left_out = pairs(list(REGISTRY), None, 256)
    for target in REGISTRY.values():
        ran = {method.name for name, method in measured if name == target.name}
        assert ran == {method.name for method in IN_NETWORK if method.aggregation.name in target.protocols}
    assert not left_out  # every target runs both protocols at k = 256
    assert pairs(["embedded"], ["atp"], 256)[0] == [("embedded", methods.by_name("atp"))]


def test_a_method_asked_for_where_it_cannot_run_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """Asked for by name it is an error naming why; by default it is left out, saying why."""
    narrow = {"embedded": dataclasses.replace(REGISTRY["embedded"], k_choices=(256,)),
              "ebpf": dataclasses.replace(REGISTRY["ebpf"], protocols=frozenset({"switchml"}))}
    monkeypatch.setattr(emulation_capacity, "REGISTRY", narrow)
    with pytest.raises(ValueError, match="atp on embedded: embedded builds no program for k = 32"):
        pairs(["embedded"], ["atp"], 32)
    with pytest.raises(ValueError, match="atp on ebpf: ebpf has no data plane for atp"):
        pairs(["ebpf"], ["atp"], 256)
    measured, left_out = pairs(["embedded", "ebpf"], None, 32)
    assert [(target, method.name) for target, method in measured] == [("ebpf", "switchml")]
    assert left_out == ["switchml on embedded: embedded builds no program for k = 32", "atp on embedded: embedded builds no program for k = 32",
                        "atp on ebpf: ebpf has no data plane for atp"]


def test_a_method_without_a_switch_is_no_capacity_probe(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="ring aggregates on no switch"):
        Prober(methods.by_name("ring"), "embedded", 8, 256, "auto", ProbeSettings(1.0, 1, 1), tmp_path, lambda probe: None)


@pytest.mark.slow
@pytest.mark.mininet
def test_probes_of_each_method_write_rows_with_every_column(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("the probe starts Mininet: needs root")
    output = tmp_path / "capacity.csv"
    argv = [sys.executable, str(REPO_ROOT / "benchmarks" / "emulation_capacity.py"), "--target", "embedded", "--workers", "2", "--k", "64",
            "--rates", "2.5", "2.5", "--repetitions", "1", "--output", str(output), "--runs-dir", str(tmp_path / "runs")]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=2 * NETWORK_WAIT_S + 600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    with output.open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and list(rows[0]) == [field.name for field in fields(Probe)]
    assert [r["method"] for r in rows] == ["switchml", "switchml", "atp", "atp"]  # every in-network method, in the registry's order
    # a rate given twice is two runs, its attempts counted on (the second once read the first's folder again)
    assert [r["attempt"] for r in rows] == ["1", "2", "1", "2"] and len({r["run_dir"] for r in rows}) == 4
    for row in rows:
        assert (row["target"], row["workers"], row["k"], float(row["link_mbps"]), row["verified"]) == ("embedded", "2", "64", 2.5, "True")
        assert 0 < float(row["share_of_bound"]) <= 1.05 and float(row["worker_us_per_packet"]) > 0
    assert [r["data_path"] for r in rows] == ["native"] * 4  # each protocol's own loop, native where it builds (hosts/atp/native)
    assert "| embedded | atp | 2 | 64 | native | 2.5 | 1 |" in done.stdout
    row = rows[0]
    assert float(row["cpu_ns_per_element"]) == pytest.approx(float(row["cpu_us_per_update"]) * 1e3 / 64, abs=0.2)  # (µs rounded to 0.01)
    assert 0 < float(row["share_of_bound"]) <= 1.05 and row["kept_up"] in ("True", "False")
    split = sum(float(row[f"cpu_{part}_us_per_update"]) for part in ("user", "system", "softirq"))
    # busy also holds steal; each part comes from a share that fidelity.csv rounds to 1e-4,
    # so the parts' sum may pass the total by that rounding (tenths of a us per update here)
    assert 0 < split <= float(row["cpu_us_per_update"]) * 1.005 + 0.1
    assert float(row["worker_us_per_packet"]) > 0 and float(row["switch_us_per_update"]) > 0  # the embedded switch is a process
    assert "| embedded | switchml | 2 | 64 | native | 2.5 | 1 |" in done.stdout
    assert not any(leftovers(r["run_dir"]) for r in rows)
