"""The numpy MLP trained data-parallel on scikit-learn's digits (workloads/training.py):
each step all-reduces the whole gradient, one run per method (experiments/kinds/training.py).

Its rules, shared with the PyTorch trainings (torch_training.py, ddp_script.py): a training
all-reduces float32 gradients, runs once per method (its steps are the repetitions) and
does not sweep.
"""

from __future__ import annotations

from typing import Any, Mapping

from base.yamlschema import ConfigError
from protocol.quantize import quantized_limit
from workloads.training import DATASETS, MLP
from workloads.workload import Workload, WorkloadInfo

HYPERPARAMETERS: dict[str, Any] = {
    "dataset": {"enum": list(DATASETS), "description": "training and torch only: the data set (scikit-learn's bundled digits)"},
    "hidden_units": {"type": "integer", "minimum": 1, "maximum": 16384, "description":
                     "training and torch only: width of the MLP's hidden layer, or of the CNN's fully connected hidden layer (32)"},
    "batch_size": {"type": "integer", "minimum": 1, "description": "training and torch only: examples per worker per step (16)"},
    "learning_rate": {"type": "number", "exclusiveMinimum": 0, "description":
                      "training and torch only: SGD step size applied to the mean gradient (0.5)"},
    "steps": {"type": "integer", "minimum": 1, "maximum": 100000, "description":
              "training and torch only: SGD steps, one all-reduce each (torch: one per DDP bucket) (300)"},
    "test_fraction": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1, "description":
                      "training and torch only: share of the data held out for test accuracy (0.2)"},
    "target_accuracy": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "description":
                        "training and torch only: test accuracy whose first step and time the summary reports (0.9)"},
}
"""The hyperparameters of a training on the digits (workloads.training.TrainingConfig)."""
HYPERPARAMETER_DEFAULTS: dict[str, Any] = {"dataset": "digits", "hidden_units": 32, "batch_size": 16, "learning_rate": 0.5,
                                           "steps": 300, "test_fraction": 0.2, "target_accuracy": 0.9}


def check_training(data: Mapping[str, Any], n_workers: int, source: str) -> None:
    """A training is one run per method of float32 gradients."""
    workload = data["workload"]
    if workload["dtype"] != "float32":
        raise ConfigError(f"{source}: workload.dtype: a training all-reduces float32 gradients, got {workload['dtype']}")
    if data["repetitions"] != 1:
        raise ConfigError(f"{source}: repetitions: a training runs once per method (its steps are the repetitions), got {data['repetitions']}")
    if data.get("sweep") is not None:
        raise ConfigError(f"{source}: sweep: a training config does not sweep; run one config per setting")


def check(data: Mapping[str, Any], n_workers: int, source: str) -> None:
    """A training's rules, and ablation widths that leave every worker at least one quantization level."""
    check_training(data, n_workers, source)
    for bits in data["workload"]["ablation_bits"]:
        try:
            quantized_limit(n_workers, bits)
        except ValueError as exc:
            raise ConfigError(f"{source}: workload.ablation_bits: {exc}") from None


def describe(workload: Mapping[str, Any]) -> WorkloadInfo:
    """The gradient of every parameter; compute is measured per step instead (training_steps.csv)."""
    return WorkloadInfo(name="training", elements=MLP(workload["hidden_units"]).parameter_count, compute_s=0.0)


TRAINING = Workload(
    name="training",
    properties=HYPERPARAMETERS | {
        "ablation_bits": {"type": "array", "uniqueItems": True, "items": {"type": "integer", "minimum": 2, "maximum": 31},
                          "description": "training only: quantization widths replayed offline next to the run ([8, 5])"},
    },
    defaults=HYPERPARAMETER_DEFAULTS | {"ablation_bits": [8, 5]},
    describe=describe,
    check=check,
    host="hosts.training:serve_training",
    rank_program="hosts.training:TrainingRank",
    experiment="training",
)
