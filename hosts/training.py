"""The training workload on a worker: one SGD step per runner command, through any method.

``hosts.worker`` runs ``serve_training`` (the training workload's host loop,
workloads/kinds/training.py) instead of replaying a fixed tensor. The conversation with the runner is the same (ready, then one
``go <n>`` and one ``done`` per all-reduce, then ``exit``), with ``n`` the step (1, 2, ...):

    runner -> "go <step>"
    worker -> {"event": "done", "repetition": step, "stats": {...}, "compute_s": s,
               "digests": {"gradient": .., "result": .., "int_sum": .., "parameters": ..},
               "result": "path.npy", "int_sum": "path.npy"}     (the two paths: rank 0 only)

Why digests: the runner replays the training (experiments/kinds/training_replay.py), so it knows
every worker's gradient; a worker reports a digest of its gradient, of its all-reduce
result (and SwitchML's integer sum) and of its parameters after the update, and rank 0
also its result arrays, which the runner verifies as it verifies any all-reduce. Equal
digests then say that every worker computed that gradient, received that verified result
and holds the same parameters, without shipping 8 copies of each array every step.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from hosts.allreduce import build
from hosts.rank import Load, serve_program
from hosts.stats import JobStats
from protocol.worker_spec import WorkerSpec
from workloads.training import MLP, Dataset, TrainingConfig, array_digest, sgd_update, worker_gradient

ARRAYS_RANK = 0
"""The rank that writes its result arrays for the runner to verify in full."""


def steps(commands: IO[str]) -> Iterator[int]:
    """The steps the runner releases, in order, until it says exit."""
    expected = 1
    for line in commands:
        command = line.split()
        if command == ["exit"]:
            return
        if len(command) != 2 or command[0] != "go" or command[1] != str(expected):
            raise ValueError(f"expected 'go {expected}' or 'exit' from the runner, got {line.strip()!r}")
        yield expected
        expected += 1
    raise EOFError("the runner closed stdin before saying exit")


def training_inputs(spec: WorkerSpec) -> tuple[TrainingConfig, Dataset]:
    """The training's settings and data set, which every kind of training worker starts from."""
    if spec.training is None:
        raise ValueError("the worker spec has no training section")
    return TrainingConfig(**spec.training.config), Dataset.load(Path(spec.training.dataset))


def serve_training(spec: WorkerSpec, rank: int, spec_path: Path) -> None:
    """Train: each released step computes this rank's gradient, all-reduces it, applies the sum (``TrainingRank``)."""
    program = TrainingRank(spec, rank)
    serve_program(program, build(spec, rank), steps(sys.stdin), lambda step: spec_path.parent / f"{spec.method}-step{step}.npy")


class TrainingRank:
    """One rank of the numpy training (hosts/rank.py's ``RankProgram``): its parameters, its
    gradient of each step, the all-reduced sum applied, and the digests the runner checks.
    It reads its data set from the file the spec names, on either clock (``load`` reads a
    given tensor, which a training has none of)."""

    def __init__(self, spec: WorkerSpec, rank: int, load: Load = np.load) -> None:
        self.config, self.data = training_inputs(spec)
        self.model = MLP(self.config.hidden_units)
        self.rank, self.n_workers = rank, spec.n_workers
        self.params = self.model.initial_parameters(self.config.seed)
        self._gradient = np.zeros(0, dtype=np.float32)
        self._compute_s = 0.0

    def tensor(self, step: int) -> np.ndarray:
        started = time.perf_counter()
        self._gradient = worker_gradient(self.model, self.config, self.data, self.params, self.rank, self.n_workers, step)
        self._compute_s = time.perf_counter() - started
        return self._gradient

    def done(self, step: int, values: np.ndarray, int_sum: np.ndarray | None, stats: JobStats) -> dict[str, Any]:
        self.params = sgd_update(self.params, values, self.n_workers, self.config.learning_rate)
        digests = {"gradient": array_digest(self._gradient), "result": array_digest(values), "parameters": array_digest(self.params)}
        event: dict[str, Any] = {"event": "done", "repetition": step, "stats": dataclasses.asdict(stats),
                                 "compute_s": self._compute_s, "digests": digests}
        if int_sum is not None:
            digests["int_sum"] = array_digest(int_sum)
        if self.rank == ARRAYS_RANK:
            event["result"] = values
            if int_sum is not None:
                event["int_sum"] = int_sum
        return event
