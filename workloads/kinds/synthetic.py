"""Synthetic tensors (workloads/synthetic.py): every rank's tensor drawn from (seed, rank),
all-reduced job after job; the sweeps' and the main job's workload."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from workloads.synthetic import synthetic_tensor
from workloads.workload import Workload, WorkloadInfo


def describe(workload: Mapping[str, Any]) -> WorkloadInfo:
    return WorkloadInfo(name="synthetic", elements=int(workload["elements"]), compute_s=0.0)


def inputs(workload: Mapping[str, Any], n_workers: int) -> list[np.ndarray]:
    return [synthetic_tensor(workload["elements"], workload["dtype"], seed=workload["seed"], rank=rank) for rank in range(n_workers)]


SYNTHETIC = Workload(
    name="synthetic",
    properties={"elements": {"type": "integer", "minimum": 1, "maximum": 1000000000,
                           "description": "synthetic only: the tensor's elements, random with workload.seed"}},
    required=("elements",),
    describe=describe,
    inputs=inputs,
    host="hosts.worker:serve",
    rank_program="hosts.rank:GivenTensor",
    experiment="sweep",
)
