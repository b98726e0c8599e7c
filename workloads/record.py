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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
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


def replay_tensors(trace: Trace, dtype: str = "float32", seed: int = 0, rank: int = 0) -> list[np.ndarray]:
    """One flat array per trace tensor for worker ``rank`` (recorded values if saved, else synthetic)."""
    npz_path = trace.gradients_path
    if npz_path is not None:
        with np.load(npz_path) as recorded:
            missing = [t.name for t in trace.tensors if t.name not in recorded]
            if missing:
                raise ValueError(f"{npz_path}: no recorded values for tensors {missing[:5]}")
            arrays = [recorded[t.name].reshape(-1).astype(dtype) for t in trace.tensors]
        wrong = [(t.name, a.size, t.count) for t, a in zip(trace.tensors, arrays) if a.size != t.count]
        if wrong:
            raise ValueError(f"{npz_path}: recorded sizes disagree with {trace.path}: {wrong[:5]}")
        return arrays
    return [synthetic_tensor(t.count, dtype, seed=seed, rank=rank, stream=i, scale=1 / math.sqrt(t.fan_in))
            for i, t in enumerate(trace.tensors)]
