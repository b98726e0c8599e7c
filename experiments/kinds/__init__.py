"""The experiment kinds, one line each: the first whose ``applies`` says yes runs a config.

Each kind is a module here on experiments/harness.py's skeleton that defines its
``ExperimentKind`` (``KIND``): ``sweep`` (all-reduce jobs over sweep points, methods and
repetitions; it takes any config, so it comes last), ``training`` (each method trains a
model step by step, with ``training_replay`` and ``training_results``), ``torch_training``
(a PyTorch model trained with DDP on the hosts, with ``torch_replay``), ``ddp_script`` (a
user's own DDP script on the hosts, with the testbed's DDP hook) and
``shared_switch`` (several jobs on one switch at once). A new kind is a module here and one
line in ``KINDS``.
"""

from __future__ import annotations

from experiments.config import Experiment
from experiments.harness import ExperimentKind
from experiments.kinds import ddp_script, shared_switch, sweep, torch_training, training

KINDS: tuple[ExperimentKind, ...] = (
    shared_switch.KIND,
    training.KIND,
    torch_training.KIND,
    ddp_script.KIND,
    sweep.KIND,
)


def kind_of(experiment: Experiment) -> ExperimentKind:
    return next(kind for kind in KINDS if kind.applies(experiment))
