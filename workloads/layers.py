"""A model's layers, in forward order, with each layer's gradient size and compute time.

Why layers: data-parallel training does not all-reduce a model's gradients in one piece
after the backward pass. The SwitchML reference's ``dnn_benchmark``, and the frameworks the
paper trains with, start a layer's all-reduce as soon as its backward pass has produced
its gradients, and wait for it only when the next forward pass reaches that layer
(workloads/step_schedule.py). How much communication hides behind compute therefore
depends on each layer's size and compute time, not only on the totals.

A layer is what the reference's ``dnn_benchmark`` CSV calls one (and what its recording
recipe in workloads/trace.py hooks): a module that owns parameters. In a trace it is the
tensors whose names share everything before the last dot (``layer1.0.conv1.weight`` is
layer ``layer1.0.conv1``); a name without a dot is a layer of its own.

Compute times come from the trace where it gives them per layer (a dnn_benchmark CSV, in
nanoseconds, used as they are), else from a *layer profile*, ``workloads/traces/layers/<model>.yaml``,
written by :mod:`workloads.measure_layers`: each layer's forward and backward time measured
on this CPU with PyTorch, in forward order, with the measurement's provenance. What is used
is each layer's *share* of the measured total, times the trace's per-iteration GPU compute
time (its ``compute.seconds_per_iteration`` and its stated source): a CPU's per-layer
shares stand in for the GPU's, which nobody here can measure. A trace without a profile (the
fused single-tensor traces: DeepLight, LSTM, UGATIT) is one layer holding the whole
compute, split forward : backward = 1 : 2 (a backward pass computes the gradients with
respect to both the inputs and the weights, twice the forward pass's multiply-adds); with
one layer the split cannot change an iteration's time (step_schedule.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from base.yamlschema import ConfigError, load_yaml
from workloads.trace import TRACES_DIR, Trace, TraceError

PROFILES_DIR = TRACES_DIR / "layers"
FORWARD_SHARE_WITHOUT_PROFILE = 1 / 3
"""A profile-less layer's forward share of its compute (forward : backward = 1 : 2)."""


@dataclass(frozen=True)
class Layer:
    name: str
    count: int
    """Gradient elements the layer's all-reduce carries."""
    forward_s: float
    backward_s: float


@dataclass(frozen=True)
class LayerProfile:
    """Measured per-layer times of one model (nanoseconds on the measuring machine), forward order."""

    model: str
    source: str
    layers: tuple[tuple[str, int, int, int], ...]
    """(layer name, elements, forward ns, backward ns)."""
    path: Path | None = None


def layer_name(tensor_name: str) -> str:
    """The layer (owning module) of a trace tensor: everything before the last dot."""
    return tensor_name.rsplit(".", 1)[0] if "." in tensor_name else tensor_name


def layer_counts(trace: Trace) -> dict[str, int]:
    """Elements per layer, in the trace's (registration) order."""
    counts: dict[str, int] = {}
    for tensor in trace.tensors:
        name = layer_name(tensor.name)
        counts[name] = counts.get(name, 0) + tensor.count
    return counts


def profile_path(model: str) -> Path:
    return PROFILES_DIR / f"{model}.yaml"


def load_profile(path: Path) -> LayerProfile:
    """A layer profile file; TraceError naming the file and the key when it is malformed."""
    try:
        data = load_yaml(path)
    except ConfigError as exc:
        raise TraceError(str(exc)) from None
    where = str(path)
    if not isinstance(data, dict) or not isinstance(data.get("layers"), list) or not data["layers"]:
        raise TraceError(f"{where}: expected a mapping with a non-empty 'layers' list")
    rows = []
    for i, row in enumerate(data["layers"]):
        if not isinstance(row, dict) or set(row) != {"name", "count", "forward_ns", "backward_ns"}:
            raise TraceError(f"{where}: layers[{i}]: expected the keys name, count, forward_ns, backward_ns")
        if not all(isinstance(row[key], int) and not isinstance(row[key], bool) and row[key] >= 0
                   for key in ("count", "forward_ns", "backward_ns")) or row["count"] == 0:
            raise TraceError(f"{where}: layers[{i}]: count must be a positive integer and the times non-negative integers")
        rows.append((str(row["name"]), row["count"], row["forward_ns"], row["backward_ns"]))
    if sum(forward + backward for _, _, forward, backward in rows) <= 0:
        raise TraceError(f"{where}: the layers' times sum to 0 ns")
    return LayerProfile(model=str(data.get("model", path.stem)), source=str(data.get("source", "")), layers=tuple(rows), path=path)


def model_layers(trace: Trace, profile: LayerProfile | None = None) -> tuple[Layer, ...]:
    """``trace``'s layers in forward order with their GPU compute times (the module doc).

    ``profile`` defaults to the times the trace file gives (a dnn_benchmark CSV), else to the
    shipped profile of the trace's name, if any. A profile must name exactly the trace's layers
    with the same sizes: it was measured on that architecture.
    """
    if profile is None and trace.layer_ns is not None:
        profile = LayerProfile(trace.name, trace.compute_source, tuple(
            (tensor.name, tensor.count, forward, backward) for tensor, (forward, backward) in zip(trace.tensors, trace.layer_ns)),
            trace.path)
    if profile is None and profile_path(trace.name).exists():
        profile = load_profile(profile_path(trace.name))
    counts = layer_counts(trace)
    if profile is None:
        if len(counts) > 1:
            raise TraceError(f"{trace.name}: {len(counts)} layers and no layer profile ({profile_path(trace.name)}): "
                             "their compute times are unknown (python -m workloads.measure_layers)")
        [(name, count)] = counts.items()
        forward = trace.compute_s * FORWARD_SHARE_WITHOUT_PROFILE
        return (Layer(name, count, forward, trace.compute_s - forward),)
    measured = {name: count for name, count, _, _ in profile.layers}
    if measured != counts:
        differ = sorted(set(measured.items()) ^ set(counts.items()))[:3]
        raise TraceError(f"{profile.path}: its layers are not {trace.name}'s (first differences: {differ})")
    total_ns = sum(forward + backward for _, _, forward, backward in profile.layers)
    per_ns = trace.compute_s / total_ns
    return tuple(Layer(name, count, forward * per_ns, backward * per_ns) for name, count, forward, backward in profile.layers)


def profile_record(model: str, source: str, layers: list[tuple[str, int, int, int]]) -> dict[str, Any]:
    """What a profile file holds (load_profile reads it back)."""
    return {"model": model, "source": source,
            "layers": [{"name": name, "count": count, "forward_ns": forward, "backward_ns": backward}
                       for name, count, forward, backward in layers]}
