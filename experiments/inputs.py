"""Each rank's input tensor for a sweep point, from the config's workload section.

The runner makes all ranks' inputs once per point: it hands each worker its own tensor
(as a .npy file) and keeps them all to compute what the result must be. A model trace is
all-reduced as one flat bucket per iteration (its tensors concatenated in trace order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from workloads.record import replay_tensors
from workloads.synthetic import synthetic_tensor
from workloads.trace import load_trace


@dataclass(frozen=True)
class WorkloadInfo:
    name: str
    elements: int
    compute_s: float
    """Per-iteration compute time, scaled by the workload's time_dilation (0 for synthetic)."""


def describe_workload(workload: Mapping[str, Any]) -> WorkloadInfo:
    if workload["kind"] == "synthetic":
        return WorkloadInfo(name="synthetic", elements=int(workload["elements"]), compute_s=0.0)
    trace = load_trace(workload["model"])
    return WorkloadInfo(name=trace.name, elements=trace.total_params, compute_s=trace.compute_s * workload["time_dilation"])


def point_inputs(workload: Mapping[str, Any], n_workers: int) -> list[np.ndarray]:
    """One flat tensor per rank, deterministic in (seed, rank)."""
    dtype, seed = workload["dtype"], workload["seed"]
    if workload["kind"] == "synthetic":
        return [synthetic_tensor(workload["elements"], dtype, seed=seed, rank=rank) for rank in range(n_workers)]
    trace = load_trace(workload["model"])
    return [np.concatenate(replay_tensors(trace, dtype, seed=seed, rank=rank)) for rank in range(n_workers)]
