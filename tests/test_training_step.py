"""A training iteration layer by layer: the layers and their compute, the overlap schedule, the
layer jobs, and the kind on the simulated clock with its figure's table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from experiments.config import CONFIG_DIR
from protocol.params import REPO_ROOT
from workloads.kinds.layers import layer_jobs, scaled_layers
from workloads.layers import Layer, LayerProfile, layer_counts, layer_name, model_layers
from workloads.step_schedule import overlapped_iteration_s, serial_iteration_s
from workloads.trace import TraceError, load_trace, shipped_traces

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)


def layers(*times: tuple[float, float]) -> list[Layer]:
    return [Layer(f"l{i}", 1, forward, backward) for i, (forward, backward) in enumerate(times)]


def test_one_layer_cannot_overlap() -> None:
    assert overlapped_iteration_s(layers((1.0, 2.0)), [4.0]) == pytest.approx(7.0)


def test_only_the_first_layers_all_reduce_shows_when_the_others_hide() -> None:
    """Layer 1's all-reduce hides behind layer 0's backward pass; layer 0's, handed over last
    and needed first, does not."""
    two = layers((1.0, 1.0), (1.0, 1.0))
    assert overlapped_iteration_s(two, [0.5, 0.5]) == pytest.approx(4.5)
    assert serial_iteration_s(two, [0.5, 0.5]) == pytest.approx(5.0)


def test_a_long_all_reduce_of_a_later_layer_delays_the_next_forward_pass() -> None:
    """Layer 1's 10 s all-reduce starts after its backward pass (t = 1) and ends at 11; layer
    0's waits behind it in the one stream; the next forward pass waits for both: 13 s a period."""
    two = layers((1.0, 1.0), (1.0, 1.0))
    assert overlapped_iteration_s(two, [0.0, 10.0]) == pytest.approx(13.0)


def test_the_schedule_refuses_mismatched_times() -> None:
    with pytest.raises(ValueError, match="one per layer"):
        overlapped_iteration_s(layers((1.0, 1.0)), [1.0, 2.0])
    with pytest.raises(ValueError, match="non-negative"):
        overlapped_iteration_s(layers((1.0, 1.0)), [-1.0])


def test_layers_are_the_modules_owning_tensors() -> None:
    assert layer_name("layer1.0.conv1.weight") == "layer1.0.conv1"
    assert layer_name("mf_user_embed") == "mf_user_embed"
    counts = layer_counts(load_trace("resnet50"))
    assert counts["layer1.0.bn1"] == 128 and counts["fc"] == 2048 * 1000 + 1000 and len(counts) == 107


@pytest.mark.parametrize("name", shipped_traces())
def test_every_shipped_trace_has_its_layers_and_their_compute(name: str) -> None:
    """A profile names exactly the trace's layers and sizes; the layers' times add up to the trace's."""
    trace = load_trace(name)
    found = model_layers(trace)
    assert sum(layer.count for layer in found) == trace.total_params
    assert sum(layer.forward_s + layer.backward_s for layer in found) == pytest.approx(trace.compute_s)
    assert all(layer.forward_s >= 0 and layer.backward_s >= 0 for layer in found)


def test_a_profile_of_another_architecture_is_refused() -> None:
    profile = LayerProfile("resnet50", "test", (("conv1", 9408, 10, 20),))
    with pytest.raises(TraceError, match="not resnet50's"):
        model_layers(load_trace("resnet50"), profile)


def test_layer_jobs_run_backwards_and_split_large_layers() -> None:
    workload = {"model": "ncf", "size_scale": 1.0, "time_dilation": 1.0, "max_job_elements": 2**23, "dtype": "float32", "seed": 1}
    jobs = layer_jobs(workload)
    found = scaled_layers(workload)
    assert [job.layer for job in jobs][:2] == [len(found) - 1, len(found) - 2], "last layer first"
    assert jobs[-1].layer == 0
    assert max(job.elements for job in jobs) == 2**23
    for index, layer in enumerate(found):
        assert sum(job.elements for job in jobs if job.layer == index) == layer.count


def simulate(config: Path, *args: str, out: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(config), "--simulate", *args, "--out", str(out)]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def test_an_iteration_on_the_simulated_clock_is_drawn_with_overlap(tmp_path: Path) -> None:
    """NCF at 1 % of its size: every layer job simulated and verified, a repeated size taking
    the simulated time it took once, the baselines by their model, and the figure's table
    composing both iterations."""
    from analysis.load import load_results
    from analysis.training_step import training_step_table

    done = simulate(CONFIG_DIR / "paper_training_speedup.yaml", "--set", "sweep.values=[ncf]", "--set", "workload.size_scale=0.01",
                    out=tmp_path / "run")
    assert done.returncode == 0, done.stderr
    run = tmp_path / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["verified"] and set(summary["simulation"]["baseline_models"]["0"]) == {"ring", "ps"}
    runs = pd.read_csv(run / "runs.csv")
    workload = yaml.safe_load((run / "config.yaml").read_text())["workload"] | {"model": "ncf"}
    jobs = layer_jobs(workload)
    assert sorted(runs["repetition"].unique()) == list(range(len(jobs)))
    assert runs.groupby("repetition")["elements"].first().tolist() == [job.elements for job in jobs]
    table = training_step_table(load_results([run]))
    assert set(table["baseline"]) == {"ring", "ps"} and table["baseline_source"].str.startswith("model").all()
    row = table.iloc[0]
    assert row["iteration_switchml_s"] <= row["serial_iteration_switchml_s"]
    assert row["speedup"] == pytest.approx(row["iteration_baseline_s"] / row["iteration_switchml_s"])


def test_a_job_of_a_size_already_simulated_takes_the_same_time(tmp_path: Path) -> None:
    """Why the runner simulates each size once per iteration on lossless links: back-to-back
    jobs of one size on the idle network take the same simulated time: the first on a fresh
    network 1.2 % less here (31.26 against 31.63 us), every later one the same within 1e-9."""
    done = simulate(CONFIG_DIR / "8workers.yaml", "--set", "methods=[switchml]", "--set", "workload.elements=70000",
                    "--set", "topology.link.bw_mbps=100000", "--set", "topology.link.delay_ms=0.001", "--set", "repetitions=3",
                    out=tmp_path / "run")
    assert done.returncode == 0, done.stderr
    runs = pd.read_csv(tmp_path / "run" / "runs.csv")
    tats = runs.groupby("repetition")["tat_s"].max()
    assert len(tats) == 3
    assert tats[1] == pytest.approx(tats[2], rel=1e-9)
    assert tats[0] == pytest.approx(tats[1], rel=0.02)


def test_a_rank_makes_each_jobs_tensor_from_its_spec() -> None:
    """hosts/layer_jobs.py's rank program all-reduces job j's tensor, the one the runner verifies against."""
    from dataclasses import replace

    from experiments.config import load_experiment
    from experiments.harness import worker_spec
    from hosts.layer_jobs import LayerJobs
    from workloads.kinds.layers import job_tensor

    point = load_experiment(CONFIG_DIR / "training_speedup_layers.yaml", ["sweep.values=[ncf]"]).points[0]
    spec = worker_spec(point, "switchml")
    with pytest.raises(ValueError, match="no workload section"):
        LayerJobs(spec, 0)
    jobs = layer_jobs(point.workload)
    program = LayerJobs(replace(spec, workload=dict(point.workload)), 2)
    for index in (0, len(jobs) - 1):
        assert program.tensor(index).tobytes() == job_tensor(point.workload, jobs[index], index, 2).tobytes()
    assert program.tensor(0).tobytes() != job_tensor(point.workload, jobs[0], 0, 1).tobytes()


@pytest.mark.parametrize("loss", [0.0, 0.05])
def test_repeated_sizes_are_simulated_once_on_lossless_links_only(tmp_path: Path, loss: float) -> None:
    """NCF's layers in jobs of 1,000 elements: on lossless links their rows repeat the
    first's and summary.json says why; on lossy links every job is simulated (its frames lost
    its own way)."""
    done = simulate(CONFIG_DIR / "training_speedup_layers.yaml", "--set", "sweep.values=[ncf]", "--set", "workload.size_scale=0.001",
                    "--set", "workload.max_job_elements=1000", "--set", "topology.workers=3", "--set", "methods=[switchml]",
                    "--set", f"topology.link.loss={loss}", out=tmp_path / "run")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    runs = pd.read_csv(tmp_path / "run" / "runs.csv")
    assert summary["verified"] and runs["verified"].all()
    full = runs[runs["elements"] == 1000].groupby("repetition")[["tat_s", "packets_sent"]].max()
    workload = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["workload"] | {"model": "ncf"}
    assert len(full) == sum(job.elements == 1000 for job in layer_jobs(workload)) > 1
    if loss:
        assert "repeated_sizes" not in summary["simulation"]
        assert len(full.drop_duplicates()) > 1, "every job simulated: loss differs between them"
    else:
        assert summary["simulation"]["repeated_sizes"]
        assert len(full.drop_duplicates()) == 1


@pytest.mark.parametrize("name", ["resnet50", "vgg19", "ssd", "bert_base", "ncf"])  # BERT-large alike, at 1.3 GB
def test_the_measured_pytorch_models_are_the_traces_architectures(name: str) -> None:
    """The profiles were measured on PyTorch models built with exactly the trace's layer names and sizes."""
    torch = pytest.importorskip("torch", reason="PyTorch (the optional extra) measures the profiles")
    from workloads.measure_layers import MODELS, check_layers

    model, _ = MODELS[name][0](torch)
    check_layers(model, name)


def test_a_measured_profile_loads_as_the_traces_layers(tmp_path: Path) -> None:
    """NCF measured here: every layer timed, in forward order, written and read back as its trace's layers."""
    pytest.importorskip("torch", reason="PyTorch (the optional extra) measures the profiles")
    from workloads.layers import load_profile
    from workloads.measure_layers import measure

    record = measure("ncf")
    assert [row["name"] for row in record["layers"]][:2] == ["mf_user_embed", "mf_item_embed"]
    assert all(row["forward_ns"] > 0 and row["backward_ns"] > 0 for row in record["layers"])
    (tmp_path / "ncf.yaml").write_text(yaml.safe_dump(record, sort_keys=False))
    found = model_layers(load_trace("ncf"), load_profile(tmp_path / "ncf.yaml"))
    assert [layer.name for layer in found] == [row["name"] for row in record["layers"]]


def test_a_dnn_benchmark_csv_gives_its_own_layer_times(tmp_path: Path) -> None:
    """The reference's format carries each layer's passes: they are the layers' compute as they are."""
    path = tmp_path / "mine.csv"
    path.write_text("layer_index,numel,forward_pass_ns,backward_pass_ns\n0,1000,50,100\n1,2000,30,70\n")
    found = model_layers(load_trace(path))
    assert [(layer.name, layer.count) for layer in found] == [("layer0", 1000), ("layer1", 2000)]
    assert [t for layer in found for t in (layer.forward_s, layer.backward_s)] == pytest.approx([50e-9, 100e-9, 30e-9, 70e-9])
