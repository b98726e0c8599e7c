"""A training iteration's layer jobs on one host (workload ``layers``, experiments/kinds/training_step.py).

The rank's input file holds every job's tensor concatenated (``tensor``) and where each
begins (``bounds``, one more than there are jobs); released with job j, the worker
all-reduces ``tensor[bounds[j]:bounds[j + 1]]``, as ``hosts.worker:serve`` all-reduces its
one tensor.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hosts.worker import answer_jobs
from protocol.worker_spec import WorkerSpec


def serve_layer_jobs(spec: WorkerSpec, rank: int, spec_path: Path) -> None:
    with np.load(spec.inputs[rank]) as saved:
        tensor, bounds = saved["tensor"], saved["bounds"]
    answer_jobs(spec, rank, spec_path, lambda job: tensor[bounds[job]:bounds[job + 1]])
