"""Replaying a data-parallel training without a network: the runner's check and the references.

Why: the training is a pure function of its config (workloads/training.py), so whoever
holds the parameters after step t can compute every worker's gradient of step t+1. The
runner uses ``Replay`` in lock step with the emulated run, to verify each step's
all-reduce against the workers' real inputs; ``replay`` runs the same loop with an
aggregation computed here instead, which gives the exact reference (float64 sums) and the
quantization ablation (SwitchML's arithmetic with fewer bits). A quantization ablation is
a property of the arithmetic, not of the network, so it needs no Mininet: with 32 bits
this replay is, bit for bit, what the switch computes (the runner checks exactly that).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from protocol.quantize import expected_sum
from workloads.training import MLP, Dataset, TrainingConfig, sgd_update, worker_gradient

Aggregation = Callable[[list[np.ndarray]], np.ndarray]
"""All workers' float32 gradients -> their (approximate) sum."""


def exact_sum(gradients: list[np.ndarray]) -> np.ndarray:
    """The reference: the float64 sum of the workers' float32 gradients (no rounding to float32)."""
    return np.sum(np.stack(gradients).astype(np.float64), axis=0)


def quantized_sum(k: int, bits: int) -> Aggregation:
    """SwitchML's result for ``bits``-bit quantization (protocol/quantize.py): what a switch
    with ``bits``-bit adders would return to every worker."""
    return lambda gradients: expected_sum(gradients, k, len(gradients), bits).values


class Replay:
    """The state every worker holds, advanced one step at a time with a given sum."""

    def __init__(self, model: MLP, config: TrainingConfig, data: Dataset, n_workers: int) -> None:
        self.model = model
        self.config = config
        self.data = data
        self.n_workers = n_workers
        self.params = model.initial_parameters(config.seed)
        self.step = 0
        """Updates applied so far; the next all-reduce is step ``step + 1``."""

    def gradients(self) -> list[np.ndarray]:
        """Every worker's gradient for the next step."""
        return [worker_gradient(self.model, self.config, self.data, self.params, rank, self.n_workers, self.step + 1)
                for rank in range(self.n_workers)]

    def apply(self, gradient_sum: np.ndarray) -> np.ndarray:
        """Apply the all-reduced sum of the next step; returns the new parameters."""
        self.params = sgd_update(self.params, gradient_sum, self.n_workers, self.config.learning_rate)
        self.step += 1
        return self.params


@dataclass(frozen=True)
class Trajectory:
    """Parameters after every step (row s-1 after step s) and the sums that produced them."""

    params: np.ndarray
    sums: np.ndarray


def replay(model: MLP, config: TrainingConfig, data: Dataset, n_workers: int, aggregate: Aggregation) -> Trajectory:
    """The whole training with ``aggregate`` as the all-reduce."""
    state = Replay(model, config, data, n_workers)
    params = np.empty((config.steps, model.parameter_count), dtype=np.float32)
    sums = np.empty((config.steps, model.parameter_count), dtype=np.float64)
    for step in range(config.steps):
        sums[step] = aggregate(state.gradients())
        params[step] = state.apply(sums[step])
    return Trajectory(params=params, sums=sums)
