"""Workloads: deterministic synthetic tensors, trace validation, shipped traces, record/replay."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from workloads.make_traces import all_traces
from workloads.record import record_trace, replay_tensors
from workloads.synthetic import INT32_SAFE, synthetic_tensor
from workloads.trace import TraceError, load_trace, parse_benchmark_csv, parse_trace, shipped_traces

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

DOCUMENTED_TOTALS = {
    "resnet50": 25_557_032, "vgg19": 143_667_240, "bert": 334_094_338, "bert_base": 109_482_240,
    "ncf": 31_832_577, "ssd": 22_894_902,
    "deeplight": 2319 * 2**18, "lstm": 1627 * 2**18, "ugatit": 2559 * 2**18,  # recalled MiB / 4 bytes
}


def test_synthetic_is_deterministic_and_rank_dependent() -> None:
    a = synthetic_tensor(1000, "float32", seed=3, rank=1)
    assert np.array_equal(a, synthetic_tensor(1000, "float32", seed=3, rank=1))
    assert not np.array_equal(a, synthetic_tensor(1000, "float32", seed=3, rank=2))
    assert not np.array_equal(a, synthetic_tensor(1000, "float32", seed=4, rank=1))
    assert a.dtype == np.float32 and abs(a.std() - 1) < 0.1


def test_synthetic_int32_sum_over_32_ranks_cannot_wrap() -> None:
    x = synthetic_tensor(100_000, "int32", seed=0, rank=0)
    assert x.dtype == np.int32 and np.abs(x.astype(np.int64)).max() <= INT32_SAFE
    assert 32 * INT32_SAFE <= 2**31 - 1


def test_synthetic_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="dtype"):
        synthetic_tensor(3, "float64")
    with pytest.raises(ValueError, match="non-negative"):
        synthetic_tensor(-1)


@pytest.mark.parametrize("name", sorted(DOCUMENTED_TOTALS))
def test_shipped_trace_loads_with_documented_total(name: str) -> None:
    trace = load_trace(name)
    assert trace.total_params == DOCUMENTED_TOTALS[name]
    assert sum(t.count for t in trace.tensors) == DOCUMENTED_TOTALS[name]
    assert trace.compute_s > 0 and trace.params_source and trace.compute_source


def test_every_shipped_trace_is_documented_and_generated() -> None:
    assert shipped_traces() == sorted(DOCUMENTED_TOTALS)
    for trace in all_traces():
        shipped = load_trace(trace.name)
        assert shipped.to_dict() == trace.to_dict(), f"{trace.name}.yaml differs from make_traces output"


def good_trace() -> dict:
    return yaml.safe_load((Path(load_trace("ncf").path)).read_text())


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("compute"), "missing key 'compute'"),
    (lambda d: d["tensors"][2].update(count=-5), r"tensors\[2\]\.count: must be a positive finite number"),
    (lambda d: d["tensors"][0].update(count=True), r"tensors\[0\]\.count: expected int"),
    (lambda d: d["tensors"][1].update(shape=[3, 3]), r"tensors\[1\]: shape \[3, 3\] has 9 elements"),
    (lambda d: d["tensors"][1].update(name=d["tensors"][0]["name"]), "duplicate tensor name"),
    (lambda d: d["parameters"].update(total=1), "tensor counts sum to"),
    (lambda d: d["parameters"].update(derivation="guess"), "derivation must be one of"),
    (lambda d: d["compute"].update(seconds_per_iteration=0), "seconds_per_iteration: must be a positive finite number"),
    (lambda d: d["compute"].update(seconds_per_iteration=float("nan")), "seconds_per_iteration: must be a positive finite number, got nan"),
    (lambda d: d.update(tensors=[]), "tensors: empty list"),
])
def test_invalid_trace_error_names_file_and_problem(tmp_path: Path, mutate, message: str) -> None:
    data = good_trace()
    mutate(data)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TraceError, match=message) as info:
        load_trace(path)
    assert str(path) in str(info.value)


def test_missing_and_malformed_files_are_trace_errors(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="absent.yaml: no such file"):
        load_trace(tmp_path / "absent.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(TraceError, match="not valid YAML"):
        load_trace(bad)
    with pytest.raises(TraceError, match="expected a mapping"):
        parse_trace(["not", "a", "mapping"], "inline")


def recorded_gradients() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    return [("fc.weight", rng.standard_normal((10, 7)).astype(np.float32)),
            ("fc.bias", rng.standard_normal(10).astype(np.float32))]


def test_record_then_replay_returns_recorded_values(tmp_path: Path) -> None:
    grads = recorded_gradients()
    path = tmp_path / "tiny.yaml"
    record_trace(path, grads, model="tiny", task="test", compute_s=0.01, gpu="none", batch_size=4,
                 source="unit test", save_values=True)
    trace = load_trace(path)
    assert [(t.name, t.count, t.shape) for t in trace.tensors] == [("fc.weight", 70, (10, 7)), ("fc.bias", 10, (10,))]
    assert trace.derivation == "recorded" and trace.gradients_path == tmp_path / "tiny.npz"
    replayed = replay_tensors(trace)
    for (_, g), r in zip(grads, replayed):
        assert np.array_equal(r, g.reshape(-1))


def test_replay_without_values_is_synthetic_with_trace_sizes(tmp_path: Path) -> None:
    path = tmp_path / "sizes.yaml"
    record_trace(path, recorded_gradients(), model="tiny", task="test", compute_s=0.01, gpu="none", batch_size=4,
                 source="unit test")
    trace = load_trace(path)
    a = replay_tensors(trace, seed=1, rank=0)
    assert [x.size for x in a] == [70, 10]
    assert np.array_equal(a[0], replay_tensors(trace, seed=1, rank=0)[0])
    assert not np.array_equal(a[0], replay_tensors(trace, seed=1, rank=1)[0])
    # fan-in scaling: the 10x7 weight is drawn with std 1/sqrt(7)
    assert np.array_equal(a[0], synthetic_tensor(70, seed=1, rank=0, stream=0, scale=7**-0.5))
    assert all(x.dtype == np.int32 for x in replay_tensors(trace, dtype="int32"))


def test_a_dnn_benchmark_csv_loads_as_a_trace_with_times_in_seconds(tmp_path: Path) -> None:
    """The reference's dnn_benchmark rows: one tensor per layer, compute = sum of both passes, ns -> s."""
    path = tmp_path / "mynet.csv"
    path.write_text("layer_index,numel,forward_pass_ns,backward_pass_ns\n0, 9408, 1500000, 3000000\n\n1,64,250000,500000\n")
    trace = load_trace(path)
    assert [(t.name, t.count) for t in trace.tensors] == [("layer0", 9408), ("layer1", 64)]
    assert trace.total_params == 9472 and trace.name == "mynet" and trace.derivation == "recorded"
    assert trace.compute_s == pytest.approx(0.00525)
    assert [t.size for t in replay_tensors(trace)] == [9408, 64]  # replays like any trace
    assert load_trace(tmp_path / "mynet.csv").tensors == parse_benchmark_csv("0,9408,1,1\n1,64,1,1\n", "x").tensors


@pytest.mark.parametrize(("text", "message"), [
    ("0,10,1,1\n1,20,1\n", r"bad\.csv:2: expected 4 columns \(layer_index, numel, forward_pass_ns, backward_pass_ns\), got 3"),
    ("0,10,1,1\n1,2.5,1,1\n", r"bad\.csv:2: expected integers .*, got 1, 2\.5, 1, 1"),
    ("layer_index,numel,forward_pass_ns,backward_pass_ns\n0,0,1,1\n", r"bad\.csv:2: numel must be positive, got 0"),
    ("0,10,1,1\n0,10,1,1\n", r"bad\.csv:2: layer_index 0 does not follow 0"),
    ("0,10,-1,1\n", r"bad\.csv:1: pass times must not be negative"),
    ("numel,layer_index,forward_pass_ns,backward_pass_ns\n", r"bad\.csv:1: expected integers"),
    ("\n\n", r"bad\.csv: no layer rows"),
    ("0,10,0,0\n", r"bad\.csv: the forward and backward times sum to 0 ns"),
])
def test_a_bad_dnn_benchmark_row_is_named_by_its_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(TraceError, match=message):
        load_trace(path)
