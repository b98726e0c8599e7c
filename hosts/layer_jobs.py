"""A training iteration's layer jobs on one rank (workload ``layers``, experiments/kinds/training_step.py).

Released with job j, the rank all-reduces job j's tensor, which it makes itself from the
workload section in its spec (workloads/kinds/layers.py: ``job_tensor``, deterministic in
seed, rank and job), as the runner makes every rank's to verify the sum: no process holds
an iteration's tensors at once (a model's 340 M elements times eight ranks). A
``RankProgram`` (hosts/rank.py), so one loop runs it on an emulated host
(``serve_layer_jobs``) and the simulated clock runs it in the runner's process.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hosts.allreduce import build
from hosts.rank import GivenTensor, Load, commands, serve_program
from protocol.worker_spec import WorkerSpec
from workloads.kinds.layers import job_tensor, layer_jobs


class LayerJobs:
    """Each released job's tensor, its result reported whole (as ``GivenTensor`` reports it)."""

    done = GivenTensor.done

    def __init__(self, spec: WorkerSpec, rank: int, load: Load = np.load) -> None:
        if spec.workload is None:
            raise ValueError("the worker spec has no workload section: a layers rank makes its jobs' tensors from it")
        self._workload, self._rank = spec.workload, rank
        self._jobs = layer_jobs(spec.workload)

    def tensor(self, repetition: int) -> np.ndarray:
        return job_tensor(self._workload, self._jobs[repetition], repetition, self._rank)


def serve_layer_jobs(spec: WorkerSpec, rank: int, spec_path: Path) -> None:
    """All-reduce job j's tensor when released with j, until told to exit; results next to the spec."""
    serve_program(LayerJobs(spec, rank), build(spec, rank), commands(),
                  lambda job: spec_path.parent / f"{spec.method}-rank{rank}-rep{job}.npy")
