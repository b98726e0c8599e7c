"""Data-parallel SGD of a one-hidden-layer MLP on scikit-learn's digits: the training workload.

Why this model and data: the paper's second claim is that quantized in-network aggregation
trains to the same accuracy as exact all-reduce. Showing it needs real gradients of a real
model on real data, small enough that 8 workers train a few hundred steps in minutes on a
2-core machine: the 1,797 8x8 digit images shipped inside the scikit-learn wheel and an MLP
64 -> hidden (tanh) -> 10 (softmax) in numpy, trained with plain minibatch SGD.

Why everything is a pure function of (config, step, rank): the runner must know, without
asking the workers, what every worker's gradient is at every step, so that it can verify
each all-reduce exactly as for any other tensor (protocol/quantize.py's expected sum) and
replay the whole training offline with other aggregations (exact float64 sums, fewer
quantization bits). So the initial parameters come from the seed, worker r's shard of the
training set is fixed, and its minibatch at step t is drawn from a generator seeded with
(seed, r, t); the parameters are one flat float32 vector that every worker updates with
the same all-reduced sum (``sgd_update``), and whoever applies the same sums holds the
same parameters, bit for bit.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

CLASSES = 10
FEATURES = 64
PIXEL_MAX = 16.0
"""digits pixels are integers 0..16; inputs are scaled to [0, 1]."""
DATASETS = ("digits",)


@dataclass(frozen=True)
class TrainingConfig:
    """The training hyperparameters of a ``workload.kind: training`` config section."""

    dataset: str
    hidden_units: int
    batch_size: int
    """Examples per worker per step (the global batch is n_workers times this)."""
    learning_rate: float
    steps: int
    test_fraction: float
    seed: int

    @classmethod
    def from_workload(cls, workload: Mapping[str, Any]) -> TrainingConfig:
        return cls(dataset=workload["dataset"], hidden_units=workload["hidden_units"], batch_size=workload["batch_size"],
                   learning_rate=workload["learning_rate"], steps=workload["steps"],
                   test_fraction=workload["test_fraction"], seed=workload["seed"])

    def as_dict(self) -> dict[str, Any]:
        """The keyword arguments that rebuild it (what a worker's spec carries)."""
        return asdict(self)


@dataclass(frozen=True)
class Dataset:
    """A seeded, stratified train/test split; features float32 in [0, 1]."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    def save(self, path: Path) -> None:
        """As .npz, for the workers (which then need neither scikit-learn nor the split)."""
        np.savez(path, x_train=self.x_train, y_train=self.y_train, x_test=self.x_test, y_test=self.y_test)

    @classmethod
    def load(cls, path: Path) -> Dataset:
        with np.load(path) as data:
            return cls(**{name: data[name] for name in ("x_train", "y_train", "x_test", "y_test")})


def load_dataset(config: TrainingConfig) -> Dataset:
    """The data set the config names, split with its seed (the same split on every call)."""
    if config.dataset not in DATASETS:
        raise ValueError(f"unknown data set {config.dataset!r}; known: {', '.join(DATASETS)}")
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.data / PIXEL_MAX).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=config.test_fraction, random_state=config.seed, stratify=y)
    return Dataset(x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)


@dataclass(frozen=True)
class MLP:
    """Shapes of the MLP and the layout of its flat parameter vector: W1, b1, W2, b2."""

    hidden_units: int

    @property
    def shapes(self) -> tuple[tuple[int, ...], ...]:
        return ((FEATURES, self.hidden_units), (self.hidden_units,), (self.hidden_units, CLASSES), (CLASSES,))

    @property
    def parameter_count(self) -> int:
        return sum(int(np.prod(shape)) for shape in self.shapes)

    def unflatten(self, params: np.ndarray) -> list[np.ndarray]:
        """W1, b1, W2, b2 as float64 arrays (views of one float64 copy of ``params``)."""
        flat = params.astype(np.float64)
        parts, start = [], 0
        for shape in self.shapes:
            size = int(np.prod(shape))
            parts.append(flat[start:start + size].reshape(shape))
            start += size
        return parts

    def initial_parameters(self, seed: int) -> np.ndarray:
        """Glorot-uniform weights, zero biases, as one float32 vector."""
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x11]))
        parts = []
        for shape in self.shapes:
            if len(shape) == 2:
                limit = np.sqrt(6.0 / (shape[0] + shape[1]))
                parts.append(rng.uniform(-limit, limit, size=shape).reshape(-1))
            else:
                parts.append(np.zeros(shape))
        return np.concatenate(parts).astype(np.float32)

    def logits(self, params: np.ndarray, x: np.ndarray) -> np.ndarray:
        w1, b1, w2, b2 = self.unflatten(params)
        return np.tanh(x @ w1 + b1) @ w2 + b2

    def gradient(self, params: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """Gradient of the mean cross-entropy over (x, y), flat float32 (what is all-reduced)."""
        w1, b1, w2, b2 = self.unflatten(params)
        hidden = np.tanh(x @ w1 + b1)
        probabilities = softmax(hidden @ w2 + b2)
        probabilities[np.arange(len(y)), y] -= 1.0
        d_logits = probabilities / len(y)
        d_hidden = (d_logits @ w2.T) * (1.0 - hidden**2)
        grads = (x.T @ d_hidden, d_hidden.sum(axis=0), hidden.T @ d_logits, d_logits.sum(axis=0))
        return np.concatenate([g.reshape(-1) for g in grads]).astype(np.float32)

    def evaluate(self, params: np.ndarray, data: Dataset) -> tuple[float, float, float]:
        """(mean training loss, training accuracy, test accuracy) of ``params``."""
        train_logits = self.logits(params, data.x_train)
        log_p = train_logits - logsumexp(train_logits)
        loss = float(-log_p[np.arange(len(data.y_train)), data.y_train].mean())
        train_accuracy = float((train_logits.argmax(axis=1) == data.y_train).mean())
        test_accuracy = float((self.logits(params, data.x_test).argmax(axis=1) == data.y_test).mean())
        return loss, train_accuracy, test_accuracy


def softmax(logits: np.ndarray) -> np.ndarray:
    return np.exp(logits - logsumexp(logits))


def logsumexp(logits: np.ndarray) -> np.ndarray:
    peak = logits.max(axis=1, keepdims=True)
    return peak + np.log(np.exp(logits - peak).sum(axis=1, keepdims=True))


def shard(n_train: int, rank: int, n_workers: int) -> np.ndarray:
    """Indices of the training examples worker ``rank`` owns: every n-th, from ``rank``."""
    return np.arange(rank, n_train, n_workers)


def minibatch(config: TrainingConfig, data: Dataset, rank: int, n_workers: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Worker ``rank``'s minibatch at ``step``: drawn without replacement from its shard with a
    generator seeded by (seed, rank, step), so it depends on nothing else."""
    own = shard(len(data.y_train), rank, n_workers)
    if config.batch_size > len(own):
        raise ValueError(f"batch_size {config.batch_size} exceeds worker {rank}'s shard of {len(own)} examples")
    rng = np.random.default_rng(np.random.SeedSequence([config.seed, rank, step]))
    chosen = own[rng.choice(len(own), size=config.batch_size, replace=False)]
    return data.x_train[chosen], data.y_train[chosen]


def worker_gradient(model: MLP, config: TrainingConfig, data: Dataset, params: np.ndarray, rank: int,
                    n_workers: int, step: int) -> np.ndarray:
    """What worker ``rank`` all-reduces at ``step`` when it holds ``params``."""
    x, y = minibatch(config, data, rank, n_workers, step)
    return model.gradient(params, x, y)


def array_digest(array: np.ndarray) -> str:
    """A short digest of an array's dtype, shape and bytes: equal digests, equal arrays."""
    digest = hashlib.blake2b(digest_size=12)
    digest.update(f"{array.dtype.str}{array.shape}".encode())
    digest.update(np.ascontiguousarray(array).tobytes())
    return digest.hexdigest()


def sgd_update(params: np.ndarray, gradient_sum: np.ndarray, n_workers: int, learning_rate: float) -> np.ndarray:
    """params - lr * (sum / n), computed in float64 and stored as float32.

    Every worker and every replay applies its all-reduced sum with this one function, so
    equal sums give bit-identical parameters; ``gradient_sum`` may be the dequantized
    float32 sum of a method or an exact float64 sum.
    """
    mean = np.asarray(gradient_sum, dtype=np.float64) / n_workers
    return (params.astype(np.float64) - learning_rate * mean).astype(np.float32)
