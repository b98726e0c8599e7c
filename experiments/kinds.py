"""The experiment kinds, one line each: the first whose ``applies`` says yes runs a config.

A new kind is a module on experiments/harness.py's skeleton that defines its
``ExperimentKind`` (``KIND``), and one line here, before the sweep (which takes any config).
"""

from __future__ import annotations

from experiments import runner, shared_switch, training_runner
from experiments.config import Experiment
from experiments.harness import ExperimentKind

KINDS: tuple[ExperimentKind, ...] = (
    shared_switch.KIND,
    training_runner.KIND,
    runner.KIND,
)


def kind_of(experiment: Experiment) -> ExperimentKind:
    return next(kind for kind in KINDS if kind.applies(experiment))
