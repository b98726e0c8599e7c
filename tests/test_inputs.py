"""Workload inputs of a sweep point: trace size scaling with time dilation (workload.size_scale).

The expected sizes and times are computed by hand in the comments, not with the code under
test, so a wrong rounding or a forgotten factor fails here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from experiments.config import CONFIG_DIR, load_experiment
from workloads.kinds import describe_workload, point_inputs
from base.yamlschema import ConfigError
from workloads.record import record_trace, replay_tensors, scaled_count
from workloads.synthetic import synthetic_tensor
from workloads.trace import load_trace

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

MAIN_CONFIG = CONFIG_DIR / "8workers.yaml"
TRAINING_CONFIG = CONFIG_DIR / "training_speedup.yaml"


@pytest.fixture
def tiny_trace(tmp_path: Path) -> Path:
    """A recorded trace: a 10x7 weight (70 elements) and a 10-element bias, 0.01 s compute."""
    rng = np.random.default_rng(0)
    gradients = [("fc.weight", rng.standard_normal((10, 7)).astype(np.float32)),
                 ("fc.bias", rng.standard_normal(10).astype(np.float32))]
    path = tmp_path / "tiny.yaml"
    record_trace(path, gradients, model="tiny", task="test", compute_s=0.01, gpu="none", batch_size=4,
                 source="unit test", save_values=True)
    return path


def trace_workload(model: str | Path, **keys: object) -> dict[str, object]:
    return {"kind": "trace", "model": str(model), "dtype": "float32", "seed": 1, "time_dilation": 1.0,
            "size_scale": 1.0, **keys}


@pytest.mark.parametrize(
    ("count", "scale", "expected"),
    [
        (70, 0.1, 7),  # 7.0 exactly
        (70, 0.07, 5),  # 4.9 -> 5
        (10, 0.07, 1),  # 0.7 -> 1
        (100, 0.07, 7),  # 7 in decimal; 100 * 0.07 is 7.000000000000001 in binary floating point
        (1, 1e-9, 1),  # never 0 elements
        (25_557_032, 1.0, 25_557_032),
    ],
)
def test_scaled_count_is_ceiling_of_decimal_product(count: int, scale: float, expected: int) -> None:
    assert scaled_count(count, scale) == expected


@pytest.mark.parametrize("scale", [0.0, -0.5, 1.5])
def test_scaled_count_rejects_scales_outside_unit_interval(scale: float) -> None:
    with pytest.raises(ValueError, match="size_scale must be in"):
        scaled_count(10, scale)


def test_size_scale_shrinks_elements_and_compute(tiny_trace: Path) -> None:
    full = describe_workload(trace_workload(tiny_trace, time_dilation=10000.0))
    scaled = describe_workload(trace_workload(tiny_trace, time_dilation=10000.0, size_scale=0.07))
    # 70 + 10 elements; 0.01 s * 10000 = 100 s
    assert (full.elements, full.compute_s) == (80, pytest.approx(100.0))
    # ceil(4.9) + ceil(0.7) = 5 + 1 = 6 elements; 0.01 s * 10000 * 0.07 = 7 s
    assert (scaled.elements, scaled.compute_s) == (6, pytest.approx(7.0))


def test_scaled_inputs_are_the_first_recorded_values(tiny_trace: Path) -> None:
    recorded = np.load(tiny_trace.with_suffix(".npz"))
    inputs = point_inputs(trace_workload(tiny_trace, size_scale=0.07), n_workers=3)
    expected = np.concatenate([recorded["fc.weight"].reshape(-1)[:5], recorded["fc.bias"][:1]])
    assert len(inputs) == 3
    for tensor in inputs:
        assert np.array_equal(tensor, expected)


def test_scaled_synthetic_replay_keeps_each_tensor(tiny_trace: Path) -> None:
    tiny_trace.with_suffix(".npz").unlink()
    trace = load_trace(tiny_trace)
    tensors = replay_tensors(trace, seed=1, rank=2, size_scale=0.1)
    assert [t.size for t in tensors] == [7, 1]
    # the scaled weight keeps its layer's magnitude: drawn with std 1/sqrt(7) (fan-in of 10x7), not 1
    assert np.array_equal(tensors[0], synthetic_tensor(7, seed=1, rank=2, stream=0, scale=7**-0.5))
    assert np.array_equal(tensors[1], synthetic_tensor(1, seed=1, rank=2, stream=1, scale=1.0))


def test_training_config_scales_compute_and_communication_alike() -> None:
    """Each point's compute : elements ratio equals the full model's, so the speedup is kept."""
    experiment = load_experiment(TRAINING_CONFIG)
    dilation = experiment.data["workload"]["time_dilation"]
    link_bps = experiment.points[0].topology.links[0].spec.bw_mbps * 1e6
    assert dilation == pytest.approx(100e9 / link_bps, rel=1e-4)  # compute slowed as much as the links
    for point in experiment.points:
        scale = point.workload["size_scale"]
        trace = load_trace(point.workload["model"])
        info = point.workload_info
        assert info.compute_s == pytest.approx(trace.compute_s * dilation * scale)
        # per-tensor ceilings add at most one element per tensor
        assert trace.total_params * scale <= info.elements <= trace.total_params * scale + len(trace.tensors)
        full_ratio = trace.compute_s * dilation / trace.total_params
        assert info.compute_s / info.elements == pytest.approx(full_ratio, rel=0.02)


def test_trace_without_size_scale_defaults_to_one_and_records_it(tmp_path: Path) -> None:
    config = yaml.safe_load(TRAINING_CONFIG.read_text())
    del config["workload"]["size_scale"]
    del config["sweep"]
    config["limits"] = {"job_timeout_s": 3600}  # the full model's all-reduce takes at least 230 s at 5 Mbit/s
    path = tmp_path / "unscaled.yaml"
    path.write_text(yaml.safe_dump(config))
    experiment = load_experiment(path)
    assert experiment.data["workload"]["size_scale"] == 1.0  # written to config.yaml by the runner
    # resnet50: 25,557,032 parameters; 0.29 s * 20000 (100 Gbit/s / 5 Mbit/s) = 5800 s
    info = experiment.points[0].workload_info
    assert (info.elements, info.compute_s) == (25_557_032, pytest.approx(5800.0))


@pytest.mark.parametrize(
    ("config", "override", "message"),
    [
        (MAIN_CONFIG, "workload.size_scale=0.5", "workload.size_scale: not allowed for workload kind synthetic"),
        (TRAINING_CONFIG, "workload.size_scale=0", "workload.size_scale: 0 is less than or equal to the minimum of 0"),
        (TRAINING_CONFIG, "workload.size_scale=1.5", "workload.size_scale: 1.5 is greater than the maximum of 1"),
        (TRAINING_CONFIG, "workload.size_scale=tiny", "workload.size_scale: 'tiny' is not of type 'number'"),
    ],
)
def test_bad_size_scale_names_the_key(config: Path, override: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_experiment(config, [override])
    assert message in str(error.value)
    assert config.name in str(error.value)
