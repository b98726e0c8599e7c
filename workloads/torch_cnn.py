"""A small PyTorch CNN on scikit-learn's digits: the model of the ``torch`` workload kind.

Why: the numpy MLP of workloads/training.py shows that quantized aggregation trains a model
to the accuracy of exact sums, but ML-systems users bring PyTorch: this model is trained
with torch's own DistributedDataParallel, on the same data, shards and minibatches
(workloads/training.py's ``load_dataset`` and ``minibatch``), so the two kinds differ only
in who computes the gradients and who calls the all-reduce.

The network: the 8x8 image, a 3x3 convolution to ``CHANNELS`` maps (ReLU, 2x2 max-pool to
4x4), then a fully connected layer of ``hidden_units`` (ReLU) and one to the 10 classes:
4,538 parameters at 32 hidden units, one DDP bucket. Built after ``torch.manual_seed(seed)``,
so every rank and the replay start from the same parameters.

This module imports torch: only the torch-specific modules may import it.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from workloads.training import CLASSES, Dataset

IMAGE_SIDE = 8
CHANNELS = 8
"""Feature maps of the convolution."""


class DigitsCNN(nn.Module):
    """conv 3x3 (1 -> CHANNELS), ReLU, max-pool 2, fc (CHANNELS*16 -> hidden), ReLU, fc (hidden -> 10)."""

    def __init__(self, hidden_units: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, CHANNELS, kernel_size=3, padding=1)
        self.hidden = nn.Linear(CHANNELS * (IMAGE_SIDE // 2) ** 2, hidden_units)
        self.out = nn.Linear(hidden_units, CLASSES)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        maps = functional.max_pool2d(functional.relu(self.conv(images)), 2)
        return self.out(functional.relu(self.hidden(maps.flatten(1))))


def build_model(hidden_units: int, seed: int) -> DigitsCNN:
    """The model with the parameters every rank starts from (seeded, single-threaded)."""
    torch.set_num_threads(1)  # n ranks share two cores; one thread also keeps the sums' order fixed
    torch.manual_seed(seed)
    return DigitsCNN(hidden_units)


def parameter_count(hidden_units: int) -> int:
    """Elements of the model's gradient: what DDP all-reduces every step."""
    return sum(p.numel() for p in DigitsCNN(hidden_units).parameters())


def images(x: np.ndarray) -> torch.Tensor:
    """Flat 64-pixel rows (workloads/training.py's features) as a batch of 1x8x8 images."""
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).reshape(-1, 1, IMAGE_SIDE, IMAGE_SIDE)


def batch_loss(model: nn.Module, x: np.ndarray, y: np.ndarray) -> torch.Tensor:
    """Mean cross-entropy of ``model`` (a DigitsCNN or the DDP wrapping one) over a minibatch."""
    return functional.cross_entropy(model(images(x)), torch.from_numpy(np.asarray(y, dtype=np.int64)))


def flat_parameters(model: nn.Module) -> np.ndarray:
    """Every parameter in ``model.parameters()`` order, as one float32 vector (a copy)."""
    with torch.no_grad():
        return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()


def evaluate(model: nn.Module, data: Dataset) -> tuple[float, float, float]:
    """(mean training loss, training accuracy, test accuracy), as workloads/training.py's MLP reports them."""
    with torch.no_grad():
        train_logits = model(images(data.x_train))
        loss = float(functional.cross_entropy(train_logits, torch.from_numpy(data.y_train)))
        train_accuracy = float((train_logits.argmax(dim=1).numpy() == data.y_train).mean())
        test_accuracy = float((model(images(data.x_test)).argmax(dim=1).numpy() == data.y_test).mean())
    return loss, train_accuracy, test_accuracy
