"""A model's training iteration, layer by layer (workloads/layers.py, workloads/step_schedule.py,
experiments/kinds/training_step.py): each layer's gradients are one all-reduce job, in the
order the backward pass hands them over (last layer first), and the iteration's time is
composed from those jobs' times and the layers' compute with the overlap of the
reference's ``dnn_benchmark``.

A layer larger than ``max_job_elements`` is all-reduced as consecutive jobs of at most that
many elements (the simulator and the workers hold every rank's tensor and result in memory:
a 670 M-element layer of 8 ranks would need tens of GB). Its all-reduce time is theirs
summed. At 100 Gbit/s a job's fixed cost is a round trip of microseconds, against tens of
milliseconds for 2^24 elements, so the split costs the layer nothing measurable.

``size_scale`` and ``time_dilation`` shrink sizes and stretch compute as for ``trace``
(workloads/kinds/trace.py), for an emulated run at a few Mbit/s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from base.yamlschema import ConfigError
from workloads.kinds.trace import TRACE, check as check_trace
from workloads.layers import Layer, layer_name, model_layers
from workloads.record import scaled_count
from workloads.synthetic import synthetic_tensor
from workloads.trace import TraceError, load_trace
from workloads.workload import Workload, WorkloadInfo

DEFAULT_MAX_JOB_ELEMENTS = 2**24


@dataclass(frozen=True)
class LayerJob:
    """One all-reduce of a layer's gradients (or of a piece of them)."""

    layer: int
    """Index of its layer in forward order."""
    elements: int
    scale: float
    """Its values' standard deviation: 1/sqrt(fan-in) of the layer's first tensor, as trace replays draw them."""


def scaled_layers(workload: Mapping[str, Any]) -> tuple[Layer, ...]:
    """The workload's layers in forward order: sizes scaled by ``size_scale`` (per tensor, as
    ``trace`` scales them), compute by ``time_dilation`` x ``size_scale``."""
    trace = load_trace(workload["model"])
    scale, stretch = workload["size_scale"], workload["time_dilation"] * workload["size_scale"]
    counts: dict[str, int] = {}
    for tensor in trace.tensors:
        counts[layer_name(tensor.name)] = counts.get(layer_name(tensor.name), 0) + scaled_count(tensor.count, scale)
    return tuple(Layer(layer.name, counts[layer.name], layer.forward_s * stretch, layer.backward_s * stretch)
                 for layer in model_layers(trace))


def layer_jobs(workload: Mapping[str, Any]) -> tuple[LayerJob, ...]:
    """Every all-reduce of one iteration, in the order the backward pass hands them over."""
    trace = load_trace(workload["model"])
    fan_in = {}
    for tensor in trace.tensors:
        fan_in.setdefault(layer_name(tensor.name), tensor.fan_in)
    most = workload["max_job_elements"]
    layers = scaled_layers(workload)
    jobs = []
    for index in reversed(range(len(layers))):
        layer = layers[index]
        pieces = math.ceil(layer.count / most)
        for piece in range(pieces):
            jobs.append(LayerJob(index, min(most, layer.count - piece * most), 1 / math.sqrt(fan_in[layer.name])))
    return tuple(jobs)


def job_tensor(workload: Mapping[str, Any], job: LayerJob, job_index: int, rank: int) -> np.ndarray:
    """Rank ``rank``'s tensor of job number ``job_index``: synthetic, its own stream per job."""
    return synthetic_tensor(job.elements, workload["dtype"], seed=workload["seed"], rank=rank, stream=job_index, scale=job.scale)


def describe(workload: Mapping[str, Any]) -> WorkloadInfo:
    """Its largest all-reduce's elements (what a job's memory and deadline are sized by;
    runs.csv has each job's) and the whole iteration's compute."""
    layers = scaled_layers(workload)
    return WorkloadInfo(name=load_trace(workload["model"]).name, elements=max(job.elements for job in layer_jobs(workload)),
                        compute_s=sum(layer.forward_s + layer.backward_s for layer in layers))


def check(data: Mapping[str, Any], n_workers: int, source: str) -> None:
    """The trace and its layer profile are read here, so a bad one fails before anything runs."""
    check_trace(data, n_workers, source)
    try:
        model_layers(load_trace(data["workload"]["model"]))
    except TraceError as exc:
        raise ConfigError(f"{source}: workload.model: {exc}") from None


LAYERS = Workload(
    name="layers",
    properties={
        "model": TRACE.properties["model"],
        "size_scale": TRACE.properties["size_scale"],
        "max_job_elements": {"type": "integer", "minimum": 1, "description":
                             f"layers only: a layer larger than this is all-reduced as consecutive jobs of at most this many "
                             f"elements ({DEFAULT_MAX_JOB_ELEMENTS})"},
    },
    required=("model",),
    defaults={"size_scale": 1.0, "max_job_elements": DEFAULT_MAX_JOB_ELEMENTS},
    describe=describe,
    check=check,
    paced=False,  # its jobs differ in size: the pace check (experiments/pace.py) paces one size per point
    host="hosts.layer_jobs:serve_layer_jobs",
    rank_program="hosts.layer_jobs:LayerJobs",
    experiment="training_step",
)
