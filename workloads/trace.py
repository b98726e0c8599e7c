"""Model traces: per-tensor gradient sizes and per-iteration compute time of a training job.

Why a file format: the per-model training-speedup plots need only (a) how many elements are
all-reduced per iteration and in which pieces and (b) how long the GPU computes, so a model
is described by data, not by running the model. Each file names its SOURCE and says whether
its numbers were computed from the architecture definition or are estimates.

Format (YAML)::

    name: resnet50                 # file stem
    model: ResNet-50
    task: ImageNet-1k classification
    parameters:
      total: 25557032              # must equal the sum of the tensor counts
      derivation: computed         # computed | estimate | recorded
      source: "..."                # where the shapes/total come from and why
    compute:
      seconds_per_iteration: 0.29  # > 0
      gpu: NVIDIA P100
      batch_size: 64               # per worker, > 0
      estimate: true
      source: "..."
    tensors:                       # in registration order
      - {name: conv1.weight, count: 9408, shape: [64, 3, 7, 7]}   # shape optional; product == count

Gradients recorded with :func:`workloads.record.record_trace` may sit beside the file as
``<stem>.npz`` (one array per tensor name).

A ``.csv`` file is read in the SwitchML reference's ``dnn_benchmark`` format instead
(:func:`parse_benchmark_csv`), so a user brings their own model's layer sizes and compute
times: one row per layer, ``layer_index, numel, forward_pass_ns, backward_pass_ns``
(optionally a header line of those four names first; blank lines are skipped). The
iteration's compute time is the sum of every layer's forward and backward time. Recording
one from a PyTorch model with hooks, for the layers that own parameters::

    layers = [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))]
    start, fwd, bwd = {}, {}, {}
    for i, m in enumerate(layers):
        m.register_forward_pre_hook(lambda m, a, i=i: start.__setitem__(i, time.perf_counter_ns()))
        m.register_forward_hook(lambda m, a, o, i=i: fwd.__setitem__(i, time.perf_counter_ns() - start[i]))
        m.register_full_backward_pre_hook(lambda m, g, i=i: start.__setitem__(-i - 1, time.perf_counter_ns()))
        m.register_full_backward_hook(lambda m, gi, go, i=i: bwd.__setitem__(i, time.perf_counter_ns() - start[-i - 1]))
    model(x).sum().backward()   # after a warm-up step; on a GPU, torch.cuda.synchronize() in each hook
    rows = [(i, sum(p.numel() for p in m.parameters(recurse=False)), fwd[i], bwd.get(i, 0)) for i, m in enumerate(layers)]

and write ``rows`` with ``csv.writer``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from base.yamlschema import ConfigError, load_yaml, read_yaml_text

TRACES_DIR = Path(__file__).resolve().parent / "traces"
DERIVATIONS = ("computed", "estimate", "recorded")


class TraceError(ValueError):
    """A trace file is missing a key or holds an impossible value; the message names file and key."""


@dataclass(frozen=True)
class TensorSpec:
    name: str
    count: int
    shape: tuple[int, ...] | None = None

    @property
    def fan_in(self) -> int:
        """Elements feeding one output unit (product of all but the first dimension); 1 without a shape."""
        return max(1, math.prod(self.shape[1:])) if self.shape else 1


@dataclass(frozen=True)
class Trace:
    name: str
    model: str
    task: str
    total_params: int
    derivation: str
    params_source: str
    compute_s: float
    gpu: str
    batch_size: int
    compute_estimate: bool
    compute_source: str
    tensors: tuple[TensorSpec, ...]
    path: Path | None = None
    layer_ns: tuple[tuple[int, int], ...] | None = None
    """Per tensor, its layer's (forward, backward) nanoseconds, where the file gives them (a
    dnn_benchmark CSV: one tensor per layer); workloads/layers.py reads them."""

    @property
    def gradients_path(self) -> Path | None:
        """``<stem>.npz`` beside the trace file, if recorded gradients were saved."""
        if self.path is None:
            return None
        npz = self.path.with_suffix(".npz")
        return npz if npz.exists() else None

    def to_dict(self) -> dict[str, Any]:
        tensors = []
        for t in self.tensors:
            entry: dict[str, Any] = {"name": t.name, "count": t.count}
            if t.shape is not None:
                entry["shape"] = list(t.shape)
            tensors.append(entry)
        return {
            "name": self.name, "model": self.model, "task": self.task,
            "parameters": {"total": self.total_params, "derivation": self.derivation, "source": self.params_source},
            "compute": {"seconds_per_iteration": self.compute_s, "gpu": self.gpu, "batch_size": self.batch_size,
                        "estimate": self.compute_estimate, "source": self.compute_source},
            "tensors": tensors,
        }


def _get(mapping: Any, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if not isinstance(mapping, dict):
        raise TraceError(f"{where}: expected a mapping, got {type(mapping).__name__}")
    if key not in mapping:
        raise TraceError(f"{where}: missing key '{key}'")
    value = mapping[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int subclass: a count of `true` is an error, not 1.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise TraceError(f"{where}.{key}: expected {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _positive(value: int | float, where: str) -> None:
    """Positive and finite (NaN compares false with everything, so ``<= 0`` lets it pass)."""
    if not (0 < value < math.inf):
        raise TraceError(f"{where}: must be a positive finite number, got {value!r}")


def parse_trace(data: Any, where: str, path: Path | None = None) -> Trace:
    """Validate a loaded YAML document; every error names ``where`` (the file) and the key."""
    name = _get(data, "name", str, where)
    params = _get(data, "parameters", dict, where)
    compute = _get(data, "compute", dict, where)
    total = _get(params, "total", int, f"{where}: parameters")
    _positive(total, f"{where}: parameters.total")
    derivation = _get(params, "derivation", str, f"{where}: parameters")
    if derivation not in DERIVATIONS:
        raise TraceError(f"{where}: parameters.derivation must be one of {DERIVATIONS}, got {derivation!r}")
    seconds = _get(compute, "seconds_per_iteration", (int, float), f"{where}: compute")
    _positive(seconds, f"{where}: compute.seconds_per_iteration")
    batch = _get(compute, "batch_size", int, f"{where}: compute")
    _positive(batch, f"{where}: compute.batch_size")
    raw_tensors = _get(data, "tensors", list, where)
    if not raw_tensors:
        raise TraceError(f"{where}: tensors: empty list")
    tensors = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_tensors):
        at = f"{where}: tensors[{i}]"
        t_name = _get(raw, "name", str, at)
        if t_name in seen:
            raise TraceError(f"{at}.name: duplicate tensor name {t_name!r}")
        seen.add(t_name)
        count = _get(raw, "count", int, at)
        _positive(count, f"{at}.count")
        shape = None
        if "shape" in raw:
            shape_list = _get(raw, "shape", list, at)
            if not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape_list):
                raise TraceError(f"{at}.shape: dimensions must be positive integers, got {shape_list!r}")
            if math.prod(shape_list) != count:
                raise TraceError(f"{at}: shape {shape_list} has {math.prod(shape_list)} elements, count says {count}")
            shape = tuple(shape_list)
        tensors.append(TensorSpec(t_name, count, shape))
    summed = sum(t.count for t in tensors)
    if summed != total:
        raise TraceError(f"{where}: parameters.total is {total} but the tensor counts sum to {summed}")
    return Trace(name=name, model=_get(data, "model", str, where), task=_get(data, "task", str, where),
                 total_params=total, derivation=derivation,
                 params_source=_get(params, "source", str, f"{where}: parameters"), compute_s=float(seconds),
                 gpu=_get(compute, "gpu", str, f"{where}: compute"), batch_size=batch,
                 compute_estimate=_get(compute, "estimate", bool, f"{where}: compute"),
                 compute_source=_get(compute, "source", str, f"{where}: compute"),
                 tensors=tuple(tensors), path=path)


BENCHMARK_COLUMNS = ("layer_index", "numel", "forward_pass_ns", "backward_pass_ns")
"""The reference's dnn_benchmark CSV: one row per layer, times in nanoseconds."""
NS_PER_S = 1e9


def parse_benchmark_csv(text: str, where: str, path: Path | None = None) -> Trace:
    """A trace from dnn_benchmark CSV rows; an error names ``where`` (the file) and the line.

    Layers keep the file's order, which must be by increasing ``layer_index``; each layer
    is one tensor ``layer<index>`` of ``numel`` elements. The CSV records no GPU or batch
    size: the trace says so, and its batch size is 1, the unit its per-iteration times are in.
    """
    tensors: list[TensorSpec] = []
    times: list[tuple[int, int]] = []
    compute_ns = 0
    previous = -1
    for line_number, row in enumerate(csv.reader(text.splitlines()), start=1):
        at = f"{where}:{line_number}"
        cells = [cell.strip() for cell in row]
        if not any(cells):
            continue
        if line_number == 1 and tuple(cells) == BENCHMARK_COLUMNS:
            continue
        if len(cells) != len(BENCHMARK_COLUMNS):
            raise TraceError(f"{at}: expected {len(BENCHMARK_COLUMNS)} columns ({', '.join(BENCHMARK_COLUMNS)}), got {len(cells)}")
        try:
            index, numel, forward_ns, backward_ns = (int(cell) for cell in cells)
        except ValueError:
            raise TraceError(f"{at}: expected integers ({', '.join(BENCHMARK_COLUMNS)}), got {', '.join(cells)}") from None
        if index <= previous:
            raise TraceError(f"{at}: layer_index {index} does not follow {previous} (layers in increasing order)")
        if numel <= 0:
            raise TraceError(f"{at}: numel must be positive, got {numel}")
        if forward_ns < 0 or backward_ns < 0:
            raise TraceError(f"{at}: pass times must not be negative, got {forward_ns} and {backward_ns} ns")
        previous = index
        tensors.append(TensorSpec(f"layer{index}", numel))
        times.append((forward_ns, backward_ns))
        compute_ns += forward_ns + backward_ns
    if not tensors:
        raise TraceError(f"{where}: no layer rows")
    if compute_ns <= 0:
        raise TraceError(f"{where}: the forward and backward times sum to 0 ns")
    name = path.stem if path is not None else Path(where).stem
    return Trace(name=name, model=name, task="a user's model (dnn_benchmark CSV)", total_params=sum(t.count for t in tensors),
                 derivation="recorded", params_source=f"{where}: numel per layer", compute_s=compute_ns / NS_PER_S,
                 gpu="not recorded in the CSV", batch_size=1, compute_estimate=False,
                 compute_source=f"{where}: sum of forward_pass_ns and backward_pass_ns over the layers",
                 tensors=tuple(tensors), path=path, layer_ns=tuple(times))


def load_trace(name_or_path: str | Path) -> Trace:
    """Load and validate a trace: a path to a YAML file or a dnn_benchmark CSV, or the name of a
    shipped trace (``resnet50``)."""
    path = Path(name_or_path)
    if path.suffix == ".csv":
        try:
            text = read_yaml_text(path, kind="CSV")  # bounded like a YAML trace: 10^7 rows took minutes and gigabytes
        except ConfigError as exc:
            raise TraceError(str(exc)) from None
        return parse_benchmark_csv(text, str(path), path)
    if path.suffix not in (".yaml", ".yml"):
        path = TRACES_DIR / f"{name_or_path}.yaml"
    try:
        data = load_yaml(path)
    except ConfigError as exc:  # missing, unreadable, oversized, an alias bomb or not YAML: the message says which
        raise TraceError(str(exc)) from None
    return parse_trace(data, str(path), path)


def write_trace(trace: Trace, path: Path) -> None:
    """Write ``trace`` as YAML (validated first, so a written file always loads)."""
    data = trace.to_dict()
    parse_trace(data, str(path))
    path.write_text(yaml.safe_dump(data, sort_keys=False, width=120, default_flow_style=None))


def shipped_traces() -> list[str]:
    """Names of the traces under workloads/traces/."""
    return sorted(p.stem for p in TRACES_DIR.glob("*.yaml"))
