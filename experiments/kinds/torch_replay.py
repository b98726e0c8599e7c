"""The exact reference of a DDP training, in one process: the same model, data and steps,
each step's gradient the exact float64 average of every rank's.

Why it is exact where the network's runs are not: DDP averages the ranks' float32 gradients
with the method's arithmetic (SwitchML's quantized integer sums, Gloo's float32 ring); here
each rank's gradient on its own minibatch (workloads/training.py's ``minibatch``, as the
workers draw it) is computed in turn, summed in float64, divided by the world size, and
only then rounded to the float32 gradient SGD applies. Starting from the same seeded model
(workloads/torch_cnn.py), it is the training every method approximates.

This module imports torch: only the torch kind (experiments/kinds/torch_training.py) imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from workloads.torch_cnn import batch_loss, build_model, evaluate, flat_parameters
from workloads.training import Dataset, TrainingConfig, minibatch


@dataclass(frozen=True)
class TorchTrajectory:
    """Row s of each array: after step s (row 0: the parameters every rank starts from)."""

    params: np.ndarray
    evaluations: np.ndarray
    """(mean training loss, training accuracy, test accuracy)."""


def exact_replay(config: TrainingConfig, data: Dataset, n_workers: int) -> TorchTrajectory:
    """The whole training with exact float64 averages of the ranks' gradients."""
    model = build_model(config.hidden_units, config.seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.learning_rate)
    params, evaluations = [flat_parameters(model)], [evaluate(model, data)]
    for step in range(1, config.steps + 1):
        totals = [torch.zeros_like(p, dtype=torch.float64) for p in model.parameters()]
        for rank in range(n_workers):
            model.zero_grad()
            batch_loss(model, *minibatch(config, data, rank, n_workers, step)).backward()
            for total, parameter in zip(totals, model.parameters()):
                total += parameter.grad.double()
        for total, parameter in zip(totals, model.parameters()):
            parameter.grad = (total / n_workers).float()
        optimizer.step()
        params.append(flat_parameters(model))
        evaluations.append(evaluate(model, data))
    return TorchTrajectory(params=np.stack(params), evaluations=np.array(evaluations))
