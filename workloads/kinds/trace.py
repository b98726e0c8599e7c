"""A model's gradient trace replayed (workloads/trace.py, workloads/record.py): each job
all-reduces one iteration's gradients as one flat bucket (its tensors concatenated in trace
order).

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

from typing import Any, Mapping

import numpy as np

from base.yamlschema import ConfigError
from workloads.record import replay_tensors, scaled_count
from workloads.trace import TraceError, load_trace, shipped_traces
from workloads.workload import Workload, WorkloadInfo


def describe(workload: Mapping[str, Any]) -> WorkloadInfo:
    trace = load_trace(workload["model"])
    scale = workload["size_scale"]
    return WorkloadInfo(
        name=trace.name,
        elements=sum(scaled_count(t.count, scale) for t in trace.tensors),
        compute_s=trace.compute_s * workload["time_dilation"] * scale,
    )


def inputs(workload: Mapping[str, Any], n_workers: int) -> list[np.ndarray]:
    trace = load_trace(workload["model"])
    return [np.concatenate(replay_tensors(trace, workload["dtype"], seed=workload["seed"], rank=rank,
                                          size_scale=workload["size_scale"])) for rank in range(n_workers)]


def check(data: Mapping[str, Any], n_workers: int, source: str) -> None:
    """The trace is read here, so a bad one fails before anything runs."""
    try:
        load_trace(data["workload"]["model"])
    except TraceError as exc:
        raise ConfigError(f"{source}: workload.model: {exc} (shipped traces: {', '.join(shipped_traces())})") from None


TRACE = Workload(
    name="trace",
    properties={
        "model": {"type": "string", "description": "trace and layers: a shipped trace's name (workloads/traces/), or a .yaml trace or dnn_benchmark .csv file, looked for next to the config, then in the current folder (as topology.file)"},
        "size_scale": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "description":
                       "trace and layers: every tensor is all-reduced at ceil(count * size_scale) elements and compute times "
                       "shrink by the same factor (1)"},
    },
    required=("model",),
    defaults={"size_scale": 1.0},
    describe=describe,
    inputs=inputs,
    check=check,
    host="hosts.worker:serve",
    rank_program="hosts.rank:GivenTensor",
    experiment="sweep",
)
