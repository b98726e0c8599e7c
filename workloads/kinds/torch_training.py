"""A small PyTorch CNN on the digits trained with DDP (workloads/torch_cnn.py,
experiments/kinds/torch_training.py): each step's buckets go through the method's DDP hook.
Loading such a config needs PyTorch; describing it imports torch only then."""

from __future__ import annotations

from typing import Any, Mapping

from base.optional import torch_unavailable
from workloads.kinds.training import HYPERPARAMETER_DEFAULTS, HYPERPARAMETERS, check_training
from workloads.workload import Workload, WorkloadInfo


def describe(workload: Mapping[str, Any]) -> WorkloadInfo:
    """The CNN's parameters; compute is measured per step."""
    from workloads.torch_cnn import parameter_count

    return WorkloadInfo(name="torch", elements=parameter_count(workload["hidden_units"]), compute_s=0.0)


TORCH = Workload(
    name="torch",
    properties=HYPERPARAMETERS,
    defaults=HYPERPARAMETER_DEFAULTS,
    describe=describe,
    check=check_training,
    unavailable=torch_unavailable,
    through_ddp=True,
    host="hosts.torch_training:serve_torch_training",
    experiment="torch",
)
