"""The experiment kinds, one line each: a config runs as the kind its workload names
(``Workload.experiment``, workloads/kinds/), unless a kind whose ``applies`` says yes
claims it first (``shared_switch``: a config with ``jobs``).

Each kind is a module here on experiments/harness.py's skeleton that defines its
``ExperimentKind`` (``KIND``): ``sweep`` (all-reduce jobs over sweep points, methods and
repetitions), ``training`` (each method trains a model step by step, with
``training_replay`` and ``training_results``), ``torch_training`` (a PyTorch model trained
with DDP on the hosts, with ``torch_replay``), ``ddp_script`` (a user's own DDP script on
the hosts, with the testbed's DDP hook) and ``shared_switch`` (several jobs on one switch
at once), ``training_step`` (a model's training iteration, every layer's all-reduce a job). A new kind is a module here and one line in ``KINDS``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from base.plugin import named
from experiments.config import Experiment, load_experiment
from experiments.harness import ExperimentKind
from experiments.kinds import ddp_script, shared_switch, sweep, torch_training, training, training_step

KINDS: tuple[ExperimentKind, ...] = (
    shared_switch.KIND,
    training.KIND,
    training_step.KIND,
    torch_training.KIND,
    ddp_script.KIND,
    sweep.KIND,
)


def by_name(name: str) -> ExperimentKind:
    """The registered experiment kind called ``name``."""
    return named(KINDS, name, "experiment kind")


def kind_of(experiment: Experiment) -> ExperimentKind:
    """The kind that runs ``experiment``."""
    claimed = [kind for kind in KINDS if kind.applies is not None and kind.applies(experiment)]
    return claimed[0] if claimed else by_name(experiment.points[0].workload_kind.experiment)


def load(path: Path, overrides: list[str] | tuple[str, ...] = (), text: str | None = None, **options: Any) -> Experiment:
    """``load_experiment``, then the rules of the kind that runs it (``ExperimentKind.check``):
    a config loads, resolves and is checked whole before anything starts."""
    experiment = load_experiment(path, overrides, text, **options)
    kind_of(experiment).check(experiment)
    return experiment
