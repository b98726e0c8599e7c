"""Each rank's input tensor for a sweep point, from the config's workload section.

The runner makes all ranks' inputs once per point: it hands each worker its own tensor
(as a .npy file) and keeps them all to compute what the result must be. A model trace is
all-reduced as one flat bucket per iteration (its tensors concatenated in trace order).

Time dilation and size scaling of traces. The emulated links are D = 100 Gbit/s / (link
rate) times slower than the paper's, so a trace's real-GPU compute time is multiplied by
``workload.time_dilation`` (D) to keep compute : communication faithful. At 10 Mbit/s
(D = 10,000) a full 25M-334M-parameter model would take minutes to hours per all-reduce,
so ``workload.size_scale`` s shrinks every tensor to ceil(count * s) elements and the
compute time by the same s: compute_s = trace compute * D * s. Communication time is linear
in size at steady state (a bandwidth-bound all-reduce moves a fixed number of bytes per
element), so both terms of (compute + comm_baseline) / (compute + comm_switchml) shrink by
s and the training speedup is preserved. Per-job fixed costs (start-up, the first round
trip, the ring's 2(n-1) latency steps) do not shrink, so very small scaled tensors take
slightly longer than s times the full-size time: their communication share, and with it
the measured speedup's distance from 1, is slightly overstated (pessimistic about how
close the models get to the bandwidth-bound behaviour they would have at full size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from workloads.record import replay_tensors, scaled_count
from workloads.synthetic import synthetic_tensor
from workloads.trace import load_trace
from workloads.training import MLP


@dataclass(frozen=True)
class WorkloadInfo:
    name: str
    elements: int
    compute_s: float
    """Per-iteration compute time times the workload's time_dilation and size_scale (0 for synthetic)."""


def describe_workload(workload: Mapping[str, Any]) -> WorkloadInfo:
    """Name, all-reduced elements and dilated compute time of a (resolved) workload section.

    A training (numpy MLP or torch CNN) all-reduces its whole gradient each step; its compute
    time is measured by the workers (training_steps.csv), so it is 0 here."""
    if workload["kind"] == "synthetic":
        return WorkloadInfo(name="synthetic", elements=int(workload["elements"]), compute_s=0.0)
    if workload["kind"] == "training":  # the gradient of every parameter; compute is measured per step instead
        return WorkloadInfo(name="training", elements=MLP(workload["hidden_units"]).parameter_count, compute_s=0.0)
    if workload["kind"] == "torch":  # the CNN's parameters; loading such a config requires torch (experiments/config.py)
        from workloads.torch_cnn import parameter_count

        return WorkloadInfo(name="torch", elements=parameter_count(workload["hidden_units"]), compute_s=0.0)
    if workload["kind"] == "ddp_script":  # a user's script: its elements are counted as it runs
        return WorkloadInfo(name="ddp_script", elements=0, compute_s=0.0)
    trace = load_trace(workload["model"])
    scale = workload["size_scale"]
    return WorkloadInfo(
        name=trace.name,
        elements=sum(scaled_count(t.count, scale) for t in trace.tensors),
        compute_s=trace.compute_s * workload["time_dilation"] * scale,
    )


def point_inputs(workload: Mapping[str, Any], n_workers: int) -> list[np.ndarray]:
    """One flat tensor per rank, deterministic in (seed, rank)."""
    dtype, seed = workload["dtype"], workload["seed"]
    if workload["kind"] == "synthetic":
        return [synthetic_tensor(workload["elements"], dtype, seed=seed, rank=rank) for rank in range(n_workers)]
    trace = load_trace(workload["model"])
    scale = workload["size_scale"]
    return [
        np.concatenate(replay_tensors(trace, dtype, seed=seed, rank=rank, size_scale=scale)) for rank in range(n_workers)
    ]
