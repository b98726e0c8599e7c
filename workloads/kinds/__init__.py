"""The workload kinds, as plug-ins: one module here per kind, each defining one ``Workload``
record (workloads/workload.py), and ``REGISTRY`` below listing them.

The config schema's ``workload.kind`` and its keys, the defaults, the config checks, the
runner's inputs, its choice of experiment kind, the pace check and the worker's host loop
all read it. Adding a workload (say ``constant``, every rank a tensor of ones): its module
here with its keys, ``describe``, ``inputs``, host loop and experiment kind (a tensor per
job runs on ``hosts.worker:serve`` and the ``sweep`` kind as it is), and one line in
``REGISTRY``.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from base.plugin import named
from workloads.kinds import ddp_script, layers, synthetic, torch_training, trace, training
from workloads.workload import Workload, WorkloadInfo

REGISTRY: tuple[Workload, ...] = (
    synthetic.SYNTHETIC,
    trace.TRACE,
    layers.LAYERS,
    training.TRAINING,
    torch_training.TORCH,
    ddp_script.DDP_SCRIPT,
)
"""Every workload kind, one line each."""


def names() -> tuple[str, ...]:
    return tuple(workload.name for workload in REGISTRY)


def by_name(name: str) -> Workload:
    """The registered workload kind called ``name``."""
    return named(REGISTRY, name, "workload kind")


def workload_of(section: Mapping[str, Any]) -> Workload:
    """The record of a (validated) ``workload`` section's kind."""
    return by_name(section["kind"])


def describe_workload(section: Mapping[str, Any]) -> WorkloadInfo:
    """Name, all-reduced elements and dilated compute time of a resolved workload section."""
    return workload_of(section).describe(section)


def point_inputs(section: Mapping[str, Any], n_workers: int) -> list[np.ndarray]:
    """One flat tensor per rank of a workload that all-reduces given tensors."""
    workload = workload_of(section)
    if workload.inputs is None:
        raise ValueError(f"workload kind {workload.name}: its hosts compute their own tensors; it has no inputs to hand them")
    return workload.inputs(section, n_workers)


__all__ = ["REGISTRY", "Workload", "WorkloadInfo", "by_name", "describe_workload", "point_inputs", "workload_of"]
