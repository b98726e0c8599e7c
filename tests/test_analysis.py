"""Tests of analysis/: models against hand-computed values, loading and validation, every figure.

Figure tests recompute what each plotted series must be straight from the CSV files with the
csv module and statistics.median (not with analysis/), following docs/results-format.md
only, so they keep working when tests/data/results_small is replaced by a real run.
"""

from __future__ import annotations

import csv
import json
import logging
import shutil
import statistics
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from analysis import models
from analysis.switchml import models as switchml_models
from analysis.__main__ import main
from analysis.aggregate import job_table, runs_sweeping, runs_with_lossy_switchml
from experiments.metrics import timed_cpu_samples
from analysis.catalog import FIGURES, by_name, render
from analysis.training_step import runs_layer_steps
from analysis.context import NOT_KEPT_UP
from analysis.figures import LINE_RATE_LABEL, METHOD_LABELS, RING_BOUND_LABEL
from analysis.load import ResultsFormatError, load_results

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

FIXTURE = Path(__file__).parent / "data" / "results_small"
NOTEBOOKS = Path(__file__).resolve().parent.parent / "analysis" / "notebooks"


# --------------------------------------------------------------------------------------
# models: hand computations


def test_switchml_line_rate_at_emulated_rate() -> None:
    # k=32: frame = 14 Eth + 20 IPv4 + 8 UDP + 13 switchml_h + 4*32 = 183 bytes (no preamble/IFG)
    # 20e6 bit/s * (128 / 183) / 32 = 437158.47 elements/s
    assert switchml_models.switchml_line_rate_ate(20e6, 32) == pytest.approx(437158.47, rel=1e-8)


def test_switchml_line_rate_at_paper_rate() -> None:
    # k=256: frame = 55 + 1024 = 1079 bytes; 100e9 * (1024 / 1079) / 32 = 1.024e14 / 34528 = 2.965709e9
    assert switchml_models.switchml_line_rate_ate(100e9, 256) == pytest.approx(2.965709e9, rel=1e-6)


def test_ring_bounds() -> None:
    # 20e6 / 8 = 2.5e6 bytes/s; * 4 / (2 * 3) = 1.666667e6 bytes/s; / 4 bytes = 416666.67 elements/s
    assert models.ring_algbw_bound(20e6, 4) == pytest.approx(1.666667e6, rel=1e-6)
    assert models.ring_ate_bound(20e6, 4) == pytest.approx(416666.67, rel=1e-8)
    # 100e9 / 8 = 12.5e9; * 8 / 14 = 7.142857e9 bytes/s
    assert models.ring_algbw_bound(100e9, 8) == pytest.approx(7.142857e9, rel=1e-6)


def test_ps_bound_equals_ring_bound() -> None:
    # co-located sharded PS: (n-1)/n pushed + (n-1)/n pulled = 2 * 3/4 = 1.5 tensor bytes per byte (n=4)
    assert models.ps_traffic_per_tensor_byte(4) == 1.5
    # 2.5e6 / 1.5 = 1.666667e6 bytes/s; / 4 = 416666.67 elements/s
    assert models.ps_algbw_bound(20e6, 4) == pytest.approx(1.666667e6, rel=1e-6)
    assert models.ps_ate_bound(20e6, 4) == pytest.approx(416666.67, rel=1e-8)


def test_busbw_and_expected_speedup() -> None:
    # busbw = 1e6 * 2 * 7 / 8 = 1.75e6
    assert models.busbw(1e6, 8) == pytest.approx(1.75e6)
    # 2(n-1)/n: n=2 -> 1.0, n=4 -> 1.5, n=8 -> 1.75
    assert [models.expected_speedup_over_ring(n) for n in (2, 4, 8)] == pytest.approx([1.0, 1.5, 1.75])


def test_training_speedup_with_dilation() -> None:
    # dilation = 100e9 / 20e6 = 5000
    assert models.time_dilation_factor(100e9, 20e6) == pytest.approx(5000.0)
    # 0.001 s of GPU compute * 5000 = 5 s: (5 + 0.3) / (5 + 0.2) = 5.3 / 5.2 = 1.0192308
    assert models.training_speedup(5.0, 0.3, 0.2) == pytest.approx(1.0192308, rel=1e-7)
    # (1 + 3) / (1 + 1) = 2
    assert models.training_speedup(1.0, 3.0, 1.0) == pytest.approx(2.0)


def test_expected_training_speedup_over_ring() -> None:
    # pure communication, n=8: 0.7 / (0.7 / 1.75) = 1.75
    assert models.expected_training_speedup_over_ring(0.0, 0.7, 8) == pytest.approx(1.75)
    # compute 1 s (0.0002 s * 5000): (1 + 0.7) / (1 + 0.4) = 1.2142857
    assert models.expected_training_speedup_over_ring(1.0, 0.7, 8) == pytest.approx(1.2142857)


@pytest.mark.parametrize(
    "call",
    [
        lambda: models.ring_ate_bound(20e6, 1),
        lambda: switchml_models.switchml_line_rate_ate(0, 32),
        lambda: models.training_speedup(-1.0, 1.0, 1.0),
    ],
)
def test_models_reject_meaningless_inputs(call) -> None:
    with pytest.raises(ValueError):
        call()


# --------------------------------------------------------------------------------------
# independent reading of the fixture (csv module only)


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


SWEEP_PRIORITY = ("workload", "n_workers", "pool_size", "loss", "elements")


def swept(rows: list[dict[str, str]]) -> str | None:
    """The column a run sweeps: sweep_param if it is a column name, else the first one that
    varies between points (a point's jobs may differ in size: a training iteration's layers)."""
    params = {row["sweep_param"] for row in rows}
    if params <= {""}:
        return None
    if len(params) == 1 and next(iter(params)) in SWEEP_PRIORITY:
        return next(iter(params))
    points = {row["point"]: row for row in rows}.values()
    return next((column for column in SWEEP_PRIORITY if len({row[column] for row in points}) > 1), None)


def newest(candidates: list[Path], what: str) -> Path:
    """The run directory the catalog must pick among ``candidates``: newest started_utc."""
    if not candidates:
        pytest.skip(f"the results fixture has no run that {what}")
    return max(candidates, key=lambda run: json.loads((run / "summary.json").read_text())["started_utc"])


def newest_run_sweeping(root: Path, column: str) -> Path:
    """The newest run sweeping the column."""
    runs = [path.parent for path in root.rglob("runs.csv") if swept(read_csv(path)) == column]
    return newest(runs, f"sweeps {column}")


def has_lossy_switchml(run: Path) -> bool:
    return any(row["method"] == "switchml" and float(row["loss"]) > 0 for row in read_csv(run / "runs.csv"))


def newest_run_with_lossy_switchml(root: Path) -> Path:
    """The newest run with a SwitchML job at loss > 0, a sweep or a single point."""
    runs = [path.parent for path in root.rglob("runs.csv") if has_lossy_switchml(path.parent)]
    return newest(runs, "has a lossy SwitchML job")


FIGURE_SWEEPS = {
    "ate_vs_workers": "n_workers", "ate_vs_workers_normalised": "n_workers", "tat_vs_size": "elements",
    "tat_inflation_vs_loss": "loss", "pool_size_sensitivity": "pool_size", "training_speedup": "workload",
}  # fmt: skip
"""The column each figure's run sweeps; loss_timeline instead takes any run with a lossy SwitchML job."""


TRAINING_FIGURES = {"training_convergence": "training", "training_torch": "torch"}
"""The figures drawn from one training run, and the workload kind of that run."""


def is_training(run: Path, workload: str = "training") -> bool:
    return any(row["workload"] == workload for row in read_csv(run / "runs.csv"))


def figure_run(root: Path, name: str) -> Path:
    """The run directory figure ``name`` must be drawn from (skips the test if there is none)."""
    if name == "loss_timeline":
        return newest_run_with_lossy_switchml(root)
    if name == "training_speedup_layers":
        return newest([path.parent for path in root.rglob("runs.csv") if runs_layer_steps(load_results([path.parent]).runs)],
                      "ran training iterations layer by layer")
    if name in TRAINING_FIGURES:
        return newest([path.parent for path in root.rglob("runs.csv") if is_training(path.parent, TRAINING_FIGURES[name])],
                      f"trained a model (workload {TRAINING_FIGURES[name]})")
    return newest_run_sweeping(root, FIGURE_SWEEPS[name])


def job_tats(run: Path) -> dict[tuple[str, str, str], float]:
    """(point, method, repetition) -> TAT of the slowest worker."""
    tats: dict[tuple[str, str, str], float] = defaultdict(float)
    for row in read_csv(run / "runs.csv"):
        key = (row["point"], row["method"], row["repetition"])
        tats[key] = max(tats[key], float(row["tat_s"]))
    return tats


def point_rows(run: Path) -> dict[tuple[str, str], dict[str, str]]:
    """(point, method) -> one worker row (its configuration columns)."""
    return {(row["point"], row["method"]): row for row in read_csv(run / "runs.csv")}


def medians_by(run: Path, column: str, value) -> dict[str, dict[float, float]]:
    """method -> {x (float of ``column``) -> median over repetitions of value(row, job TAT)}."""
    rows = point_rows(run)
    samples: dict[str, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (point, method, _), tat in job_tats(run).items():
        row = rows[(point, method)]
        samples[method][float(row[column])].append(value(row, tat))
    return {method: {x: statistics.median(v) for x, v in by_x.items()} for method, by_x in samples.items()}


def series(ax) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Legend label -> (x, y) of every error-bar series on ``ax``."""
    out = {}
    for container in ax.containers:
        if container.get_label().startswith("_"):
            continue
        line = container.lines[0]
        out[container.get_label()] = (np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float))
    return out


def model_line(ax, label: str):
    (line,) = [line for line in ax.lines if line.get_label() == label]
    return np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)


def assert_series(ax, expected: dict[str, dict[float, float]]) -> None:
    drawn = series(ax)
    assert set(drawn) == {METHOD_LABELS[method] for method in expected}
    for method, points in expected.items():
        x, y = drawn[METHOD_LABELS[method]]
        assert list(x) == sorted(points)
        assert y == pytest.approx([points[value] for value in sorted(points)], rel=1e-9)


def ate(row: dict[str, str], tat: float) -> float:
    return float(row["elements"]) / tat


@pytest.fixture(scope="module")
def results():
    return load_results([FIXTURE])


# --------------------------------------------------------------------------------------
# loading and aggregation


def test_load_finds_every_run(results) -> None:
    run_dirs = {path.parent for path in FIXTURE.rglob("runs.csv")}
    assert len(results.summary) == len(run_dirs)
    assert results.runs["run"].nunique() == len(run_dirs)
    assert len(results.runs) == sum(len(read_csv(run / "runs.csv")) for run in run_dirs)


def test_job_tat_is_the_slowest_worker(results) -> None:
    run = next(iter(sorted(FIXTURE.rglob("runs.csv")))).parent
    rows = read_csv(run / "runs.csv")
    expected: dict[tuple[int, str, int], float] = defaultdict(float)
    for row in rows:
        key = (int(row["point"]), row["method"], int(row["repetition"]))
        expected[key] = max(expected[key], float(row["tat_s"]))
    run_id = run.relative_to(FIXTURE).as_posix()
    jobs = job_table(results.runs[results.runs["run"] == run_id])
    got = {(int(j.point), j.method, int(j.repetition)): j.tat_s for j in jobs.itertuples()}
    assert got == pytest.approx(dict(expected))


def test_cpu_shares_of_short_jobs_are_ignored() -> None:
    # jobs (point 0, rep 0) and (0, 1): slowest worker 0.3 s and 0.05 s; 10 ms CPU ticks make the second meaningless
    runs = pd.DataFrame({"point": [0, 0, 0, 0], "method": ["ring"] * 4, "repetition": [0, 0, 1, 1],
                         "tat_s": [0.1, 0.3, 0.05, 0.04]})
    fidelity = pd.DataFrame({"point": [0, 0, 0], "method": ["ring"] * 3, "repetition": [1, 0, 1],
                             "host": ["h1", "h1", "s1"], "cpu_busy_fraction": [1.4, 0.97, 0.5]})
    kept = timed_cpu_samples(fidelity, runs)
    assert kept.to_dict("records") == [fidelity.iloc[1].to_dict()]


def copy_run(tmp_path: Path, column: str = "n_workers") -> Path:
    target = tmp_path / "copy" / "run"
    shutil.copytree(newest_run_sweeping(FIXTURE, column), target)
    return target


def test_missing_column_names_file_and_column(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    rows = read_csv(run / "runs.csv")
    for row in rows:
        del row["tat_s"]
    write_csv(run / "runs.csv", rows)
    with pytest.raises(ResultsFormatError, match=r"runs\.csv: missing column\(s\) tat_s"):
        load_results([run])


def test_missing_file_is_named(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    (run / "fidelity.csv").unlink()
    with pytest.raises(ResultsFormatError, match=r"fidelity\.csv: file missing"):
        load_results([run])


def test_unknown_method_is_named(tmp_path: Path) -> None:
    run = copy_run(tmp_path)
    rows = read_csv(run / "runs.csv")
    rows[0]["method"] = "allgather"
    write_csv(run / "runs.csv", rows)
    with pytest.raises(ResultsFormatError, match=r"runs\.csv: unknown method\(s\) allgather"):
        load_results([run])


def test_directory_without_runs_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ResultsFormatError, match="no runs.csv"):
        load_results([tmp_path])


# --------------------------------------------------------------------------------------
# figures


def test_every_figure_with_data_is_written(tmp_path: Path, caplog) -> None:
    present = {swept(read_csv(path)) for path in FIXTURE.rglob("runs.csv")}
    lossy = any(has_lossy_switchml(path.parent) for path in FIXTURE.rglob("runs.csv"))
    trained = {name: any(is_training(path.parent, workload) for path in FIXTURE.rglob("runs.csv"))
               for name, workload in TRAINING_FIGURES.items()}
    layer_steps = bool(runs_layer_steps(load_results([FIXTURE]).runs))
    with caplog.at_level(logging.INFO):
        assert main([str(FIXTURE), "--out", str(tmp_path), "--mixed-commits"]) == 0  # its runs were written by different versions
    for spec in FIGURES:
        special = {"loss_timeline": lossy, "training_speedup_layers": layer_steps, **trained}
        if special[spec.name] if spec.name in special else FIGURE_SWEEPS[spec.name] in present:
            for suffix in ("png", "pdf", "csv"):
                assert (tmp_path / f"{spec.name}.{suffix}").stat().st_size > 0, f"{spec.name}.{suffix}"
        else:
            assert f"skipped {spec.name}" in caplog.text


def test_figures_without_data_are_skipped_and_logged(tmp_path: Path, caplog) -> None:
    run = copy_run(tmp_path, "pool_size")
    with caplog.at_level(logging.INFO):
        assert main([str(run), "--out", str(tmp_path / "figs")]) == 0
    assert (tmp_path / "figs" / "pool_size_sensitivity.png").exists()
    assert not (tmp_path / "figs" / "ate_vs_workers.png").exists()
    assert "skipped ate_vs_workers: no run sweeps n_workers" in caplog.text


BOUND_REACHED = 0.85
"""The least share of its line-rate bound the fixture's lossless SwitchML jobs reach (93-95 %)."""


def test_ate_vs_workers(results) -> None:
    run = newest_run_sweeping(FIXTURE, "n_workers")
    _, fig = render(by_name("ate_vs_workers"), results)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "number of workers"
    assert ax.get_ylabel() == "ATE/s (aggregated elements / s)"
    assert_series(ax, medians_by(run, "n_workers", ate))
    row = next(iter(point_rows(run).values()))
    link_bps, k = float(row["link_mbps"]) * 1e6, int(row["k"])
    x, y = model_line(ax, LINE_RATE_LABEL)
    assert y == pytest.approx([switchml_models.switchml_line_rate_ate(link_bps, k)] * len(x))
    # ... and bounds what SwitchML measured on those links, which ran at 93-95 % of it: the
    # line above holds for any number the model returns (lab 0's `return 1.0` passed it).
    for measured in medians_by(run, "n_workers", ate)["switchml"].values():
        assert measured <= y[0] <= measured / BOUND_REACHED, f"a bound of {y[0]:g} elements/s for a measured {measured:g}"
    x, y = model_line(ax, RING_BOUND_LABEL)
    assert y == pytest.approx([models.ring_ate_bound(link_bps, int(n)) for n in x])


def test_ate_vs_workers_normalised(results) -> None:
    run = newest_run_sweeping(FIXTURE, "n_workers")
    row = next(iter(point_rows(run).values()))
    bound = switchml_models.switchml_line_rate_ate(float(row["link_mbps"]) * 1e6, int(row["k"]))
    _, fig = render(by_name("ate_vs_workers_normalised"), results)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "ATE/s ÷ SwitchML line-rate bound"
    assert_series(ax, medians_by(run, "n_workers", lambda r, tat: ate(r, tat) / bound))
    assert set(model_line(ax, LINE_RATE_LABEL)[1]) == {1.0}


def test_tat_vs_size(results) -> None:
    run = newest_run_sweeping(FIXTURE, "elements")
    _, fig = render(by_name("tat_vs_size"), results)
    ax = fig.axes[0]
    assert (ax.get_xscale(), ax.get_yscale()) == ("log", "log")
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("tensor size (elements)", "TAT (s)")
    assert_series(ax, medians_by(run, "elements", lambda r, tat: tat))
    row = next(iter(point_rows(run).values()))
    x, y = model_line(ax, LINE_RATE_LABEL)
    assert y == pytest.approx(x / switchml_models.switchml_line_rate_ate(float(row["link_mbps"]) * 1e6, int(row["k"])))


def with_gloo(tmp_path: Path, column: str) -> Path:
    """A copy of the fixture run sweeping ``column`` in which gloo ran too: the ring's rows
    again as gloo's, each TAT 1.5 times the ring's (the fixture predates the gloo method)."""
    run = copy_run(tmp_path, column)
    rows = read_csv(run / "runs.csv")
    gloo = [dict(row, method="gloo", tat_s=str(1.5 * float(row["tat_s"]))) for row in rows if row["method"] == "ring"]
    write_csv(run / "runs.csv", rows + gloo)
    return run


@pytest.mark.parametrize(("figure", "column", "value"), [
    ("ate_vs_workers", "n_workers", ate),
    ("tat_vs_size", "elements", lambda row, tat: tat),
])
def test_sweeps_with_gloo_draw_its_curve_beside_ring_and_ps(tmp_path: Path, figure: str, column: str, value) -> None:
    run = with_gloo(tmp_path, column)
    _, fig = render(by_name(figure), load_results([run]))
    expected = medians_by(run, column, value)
    assert {"switchml", "ring", "ps", "gloo"} <= set(expected)
    assert_series(fig.axes[0], expected)


def test_tat_inflation_vs_loss(results) -> None:
    run = newest_run_sweeping(FIXTURE, "loss")
    tats = medians_by(run, "loss", lambda r, tat: tat)
    _, fig = render(by_name("tat_inflation_vs_loss"), results)
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("loss rate per link (%)", "TAT(loss) / TAT(0)")
    # median of TAT / TAT0 == median(TAT) / TAT0: dividing by a constant keeps the order
    expected = {
        method: {loss * 100: tat / by_loss[0.0] for loss, tat in by_loss.items() if loss > 0}
        for method, by_loss in tats.items()
    }
    assert_series(ax, expected)


def test_loss_timeline(results) -> None:
    run = newest_run_with_lossy_switchml(FIXTURE)
    _, fig = render(by_name("loss_timeline"), results)
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("time since job start (ms)", "packets sent per 10 ms")
    switchml = {point: row for (point, method), row in point_rows(run).items() if method == "switchml"}
    worst = max(float(row["loss"]) for row in switchml.values())
    point = next(point for point, row in switchml.items() if float(row["loss"]) == worst)
    first = min(int(rep) for (p, m, rep) in job_tats(run) if (p, m) == (point, "switchml"))
    timeline = [
        row
        for row in read_csv(run / "timeline.csv")
        if (row["point"], row["method"], int(row["repetition"])) == (point, "switchml", first)
    ]
    ranks = sorted({int(row["rank"]) for row in timeline})
    workers = {line.get_label(): line for line in ax.lines if line.get_label().startswith("worker")}
    assert sorted(workers) == sorted(f"worker {rank}" for rank in ranks)
    by_time = sorted(timeline, key=lambda row: float(row["t_ms"]))
    sent = [int(row["packets_sent"]) for row in by_time if int(row["rank"]) == ranks[0]]
    assert list(workers[f"worker {ranks[0]}"].get_ydata()) == sent
    assert f"{worst:.2%}" in fig.get_suptitle()


def test_pool_size_sensitivity(results) -> None:
    run = newest_run_sweeping(FIXTURE, "pool_size")
    _, fig = render(by_name("pool_size_sensitivity"), results)
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("pool size (slots)", "ATE/s (aggregated elements / s)")
    assert_series(ax, medians_by(run, "pool_size", ate))


def test_training_speedup(results) -> None:
    run = newest_run_sweeping(FIXTURE, "workload")
    rows = point_rows(run)
    comm: dict[tuple[str, str], list[float]] = defaultdict(list)
    for (point, method, _), tat in job_tats(run).items():
        comm[(rows[(point, method)]["workload"], method)].append(tat)
    table, fig = render(by_name("training_speedup"), results)
    ax = fig.axes[0]
    assert ax.get_ylabel() == "training speedup of SwitchML"
    bars = {c.get_label(): c for c in ax.containers if not c.get_label().startswith("_")}
    workloads = [tick.get_text() for tick in ax.get_xticklabels()]
    assert f"over {METHOD_LABELS['ring']} (measured)" in bars
    workload = yaml.safe_load((run / "config.yaml").read_text())["workload"]
    dilation, size_scale = workload["time_dilation"], workload["size_scale"]
    for workload, patch in zip(workloads, bars[f"over {METHOD_LABELS['ring']} (measured)"].patches, strict=True):
        compute = float(next(r for (_, m), r in rows.items() if r["workload"] == workload and m == "ring")["compute_s"])
        ring, switchml = (statistics.median(comm[(workload, method)]) for method in ("ring", "switchml"))
        expected = models.training_speedup(compute, ring, switchml)  # compute_s is already dilated and scaled
        assert patch.get_height() == pytest.approx(expected)
    subtitle = ax.get_title(loc="left")
    assert f"compute ×{dilation:g}" in subtitle
    assert f"gradients and compute ×{size_scale:g}" in subtitle
    assert f"links ×{100e3 / float(next(iter(rows.values()))['link_mbps']):g} slower" in subtitle


def test_training_speedup_of_unscaled_runs_states_scale_one(tmp_path: Path) -> None:
    """Runs from before workload.size_scale existed have no such key: they were not scaled."""
    run = tmp_path / "copy" / "run"
    shutil.copytree(newest_run_sweeping(FIXTURE, "workload"), run)
    config = yaml.safe_load((run / "config.yaml").read_text())
    del config["workload"]["size_scale"]
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    table, fig = render(by_name("training_speedup"), load_results([run]))
    assert set(table["size_scale"]) == {1.0}
    assert "gradients and compute ×1 " in fig.axes[0].get_title(loc="left")


@pytest.mark.parametrize("figure", TRAINING_FIGURES)
def test_training_figures(results, figure: str) -> None:
    """Every series' test accuracy per step (top) and distance to exact (bottom) as in training_steps.csv."""
    run = figure_run(FIXTURE, figure)
    curves: dict[str, dict[int, tuple[float, float]]] = defaultdict(dict)
    for row in read_csv(run / "training_steps.csv"):
        curves[row["series"]][int(row["step"])] = (float(row["test_accuracy"]) * 100, float(row["max_param_diff"]))
    assert {"exact", "switchml"} <= set(curves)
    _, fig = render(by_name(figure), results)
    by_step, by_time, drift = fig.axes
    for line in by_step.lines:
        expected = curves[line.get_label()]
        assert list(line.get_xdata()) == sorted(expected)
        assert list(line.get_ydata()) == pytest.approx([expected[step][0] for step in sorted(expected)])
    assert {line.get_label() for line in by_step.lines} == set(curves)
    assert {line.get_label() for line in drift.lines} == set(curves) - {"exact"}
    for line in drift.lines:
        expected = curves[line.get_label()]
        assert list(line.get_ydata()) == pytest.approx([expected[step][1] for step in sorted(expected) if step > 0])
    network = {row["series"] for row in read_csv(run / "training_steps.csv") if row["source"] == "network"}
    assert {line.get_label() for line in by_time.lines} == network


@pytest.mark.parametrize("spec", FIGURES, ids=lambda spec: spec.name)
def test_every_figure_states_the_emulation(results, spec) -> None:
    run = figure_run(FIXTURE, spec.name)
    summary = json.loads((run / "summary.json").read_text())
    link = float(next(iter(point_rows(run).values()))["link_mbps"])
    _, fig = render(spec, results)
    subtitle = fig.axes[0].get_title(loc="left")
    assert f"{link:g} Mbit/s" in subtitle and summary["switch_target"] in subtitle and "Emulation" in subtitle


def stamped(fig) -> bool:
    return any(text.get_text() == NOT_KEPT_UP for text in fig.texts)


def set_fidelity(run: Path, kept_up: bool, cpu: float, achieved_fraction: float | None, tat_s: float) -> None:
    """Overwrite every job's fidelity and every worker's TAT (CPU shares count from 0.2 s jobs)."""
    runs = read_csv(run / "runs.csv")
    for row in runs:
        row["tat_s"] = str(tat_s)
    write_csv(run / "runs.csv", runs)
    summary = json.loads((run / "summary.json").read_text())
    summary["kept_up"] = kept_up
    (run / "summary.json").write_text(json.dumps(summary))
    rows = read_csv(run / "fidelity.csv")
    for row in rows:
        row["cpu_busy_fraction"] = str(cpu)
        configured = float(row["configured_mbps"])
        row["achieved_mbps"] = "" if achieved_fraction is None else str(configured * achieved_fraction)
    write_csv(run / "fidelity.csv", rows)


@pytest.mark.parametrize(
    ("kept_up", "cpu", "achieved_fraction", "tat_s", "marked"),
    [
        (True, 0.5, 1.0, 1.0, False),
        (True, 0.5, 0.5, 1.0, False),  # below the configured rate: the job simply did not fill the link
        (True, 0.5, None, 1.0, False),  # achieved rate not measured on this host
        (False, 0.5, 1.0, 1.0, True),
        (True, 0.96, 1.0, 1.0, True),
        (True, 0.96, 1.0, 0.2, True),  # just long enough for 10 ms CPU ticks to mean something
        (True, 1.3, 1.0, 0.05, False),  # a 50 ms job: one 10 ms CPU tick is 20 % of a core
        (True, 0.5, 1.5, 1.0, True),  # above the configured rate: shaping did not hold
    ],
)
def test_figure_marked_when_emulation_did_not_keep_up(tmp_path, kept_up, cpu, achieved_fraction, tat_s, marked) -> None:
    run = copy_run(tmp_path)
    set_fidelity(run, kept_up, cpu, achieved_fraction, tat_s)
    _, fig = render(by_name("ate_vs_workers"), load_results([run]))
    assert stamped(fig) == marked


# --------------------------------------------------------------------------------------
# notebooks


def test_notebooks_are_up_to_date() -> None:
    nbformat = pytest.importorskip("nbformat", reason="optional dependency group 'notebooks' not installed")
    from analysis.notebooks.build import notebook_for, notebook_path

    for spec in FIGURES:
        assert nbformat.read(notebook_path(spec), as_version=4) == notebook_for(spec), (
            f"{notebook_path(spec).name} is stale: run python -m analysis.notebooks.build"
        )


def test_notebook_executes_headless() -> None:
    nbformat = pytest.importorskip("nbformat", reason="optional dependency group 'notebooks' not installed")
    nbclient = pytest.importorskip("nbclient", reason="optional dependency group 'notebooks' not installed")
    pytest.importorskip("ipykernel", reason="optional dependency group 'notebooks' not installed")
    notebook = nbformat.read(NOTEBOOKS / "ate_vs_workers.ipynb", as_version=4)
    resources = {"metadata": {"path": str(NOTEBOOKS)}}
    nbclient.NotebookClient(notebook, timeout=180, kernel_name="python3", resources=resources).execute()
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [output for output in outputs if output.output_type == "error"]
    assert any("image/png" in output.get("data", {}) for output in outputs), "the notebook did not show the figure"


def test_emulation_note_states_link_delay_and_its_mechanism() -> None:
    from analysis.context import EmulationContext, link_delays

    summary = pd.DataFrame({"link_delay_ms": [10.0, 0.0, None], "delay_mechanism": ["switch_delay_line", "none", None]})
    delays = link_delays(summary)
    assert delays == ("10 ms (switch_delay_line)",)
    note = EmulationContext(link_mbps=(2.5,), switch_targets=("embedded",), problems=(), link_delays=delays).describe()
    assert note == "Emulation: links shaped to 2.5 Mbit/s with 10 ms (switch_delay_line) delay, switch target embedded (not the paper's hardware)"
    assert link_delays(pd.DataFrame({"switch_target": ["embedded"]})) == ()  # runs from before the field existed


def test_a_sweep_of_whole_topologies_provides_no_paper_figure() -> None:
    """configs/hierarchical.yaml varies loss (and aggregation, uplinks) between its points:
    neither the loss sweep nor the loss timeline may take it for theirs."""
    rows = [
        {"run": "hier", "sweep_param": "topology", "method": "switchml", "loss": loss, "n_workers": 8, "elements": 10,
         "pool_size": 64, "link_mbps": 2.5, "workload": "synthetic", "point": i}
        for i, loss in enumerate((0.0, 0.01))
    ] + [
        {"run": "star", "sweep_param": "topology.link.loss", "method": "switchml", "loss": loss, "n_workers": 8,
         "elements": 10, "pool_size": 64, "link_mbps": 2.5, "workload": "synthetic", "point": i}
        for i, loss in enumerate((0.0, 0.01))
    ]
    runs = pd.DataFrame(rows)
    assert runs_sweeping(runs, "loss") == ["star"]
    assert runs_with_lossy_switchml(runs) == ["star"]


def test_the_data_path_is_read_under_its_current_key_and_the_one_results_wrote_before() -> None:
    """summary.json's ``data_path`` was ``switchml_data_path`` before it named its protocol
    (docs/results-format.md); a reader takes either."""
    from protocol.results_format import data_path_of

    earlier = {"switchml_data_path": {"requested": "auto", "used": "native", "reason": "built"}}
    assert data_path_of(earlier) == {"protocol": "switchml", "requested": "auto", "used": "native", "reason": "built"}
    assert data_path_of({"points": [{"switchml_data_path": "native"}]}) is None and data_path_of({"switchml_data_path": "native"}) == "native"
    assert data_path_of({"points": [], "data_path": {"protocol": "switchml", "used": "python"}})["used"] == "python"
    assert data_path_of({"switch_target": "embedded"}) is None
