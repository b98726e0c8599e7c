"""Record a trace from a real training step, and replay a trace as tensors.

Why: the shipped traces describe the paper's models; a user with their own model records
its gradients once (sizes, and optionally the values) and the testbed replays them without
the ML framework. PyTorch users pass
``[(name, p.grad.detach().cpu().numpy()) for name, p in model.named_parameters()]``;
nothing here imports torch.

Replay: sizes always come from the trace. Values come from ``<stem>.npz`` when it exists
(the same recorded gradients for every rank, cast to the requested dtype), otherwise from
:func:`workloads.synthetic.synthetic_tensor` with one stream per tensor and, for float32,
scale 1/sqrt(fan_in) of the tensor's shape.

Scaled replay (``size_scale`` s < 1): every tensor shrinks to ``scaled_count(count, s)``
elements (recorded values: its first ones; synthetic: drawn at that size with the full
tensor's fan-in scale). Why per tensor and not the whole bucket: the model's mix of layer
sizes and magnitudes, which SwitchML's per-block exponents react to, stays the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from pathlib import Path

import numpy as np

from workloads.synthetic import synthetic_tensor
from workloads.trace import TensorSpec, Trace, write_trace


def record_trace(path: Path, gradients: Sequence[tuple[str, np.ndarray]], *, model: str, task: str,
                 compute_s: float, gpu: str, batch_size: int, source: str, save_values: bool = False) -> Trace:
    """Write a trace for ``gradients`` (name, array) to ``path`` (.yaml); with ``save_values`` also ``<stem>.npz``."""
    path = Path(path)
    tensors = tuple(TensorSpec(name, int(g.size), tuple(int(d) for d in g.shape)) for name, g in gradients)
    trace = Trace(name=path.stem, model=model, task=task, total_params=sum(t.count for t in tensors),
                  derivation="recorded", params_source=source, compute_s=compute_s, gpu=gpu,
                  batch_size=batch_size, compute_estimate=False,
                  compute_source=f"measured by the recording run: {source}", tensors=tensors, path=path)
    write_trace(trace, path)
    if save_values:
        np.savez(path.with_suffix(".npz"), **{name: np.asarray(g) for name, g in gradients})
    return trace


def scaled_count(count: int, size_scale: float) -> int:
    """Elements a tensor of ``count`` elements is replayed at: ceil(count * size_scale), at least 1.

    The product is taken in exact decimal arithmetic (``Fraction(str(s))``, the value as
    written in the config) so that, say, 100 elements at s = 0.07 give 7, not the 8 that
    ceil(7.000000000000001) would.
    """
    if not 0 < size_scale <= 1:
        raise ValueError(f"size_scale must be in (0, 1], got {size_scale!r}")
    return max(1, math.ceil(count * Fraction(str(size_scale))))


def replay_tensors(trace: Trace, dtype: str = "float32", seed: int = 0, rank: int = 0,
                   size_scale: float = 1.0) -> list[np.ndarray]:
    """One flat array per trace tensor for worker ``rank`` (recorded values if saved, else synthetic).

    With ``size_scale`` < 1 each tensor has ``scaled_count(count, size_scale)`` elements
    (see the module doc).
    """
    counts = [scaled_count(t.count, size_scale) for t in trace.tensors]
    npz_path = trace.gradients_path
    if npz_path is not None:
        with np.load(npz_path) as recorded:
            missing = [t.name for t in trace.tensors if t.name not in recorded]
            if missing:
                raise ValueError(f"{npz_path}: no recorded values for tensors {missing[:5]}")
            arrays = [recorded[t.name].reshape(-1) for t in trace.tensors]
        wrong = [(t.name, a.size, t.count) for t, a in zip(trace.tensors, arrays) if a.size != t.count]
        if wrong:
            raise ValueError(f"{npz_path}: recorded sizes disagree with {trace.path}: {wrong[:5]}")
        return [a[:n].astype(dtype) for a, n in zip(arrays, counts)]
    return [synthetic_tensor(n, dtype, seed=seed, rank=rank, stream=i, scale=1 / math.sqrt(t.fan_in))
            for i, (t, n) in enumerate(zip(trace.tensors, counts))]
