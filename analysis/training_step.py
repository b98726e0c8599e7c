"""The per-model training speedup from a run of layer jobs (workload ``layers``,
experiments/kinds/training_step.py): each iteration composed from its layers' all-reduce
times and compute, with the reference's overlap (workloads/step_schedule.py).

A layer's all-reduce time is the sum of its jobs' times, each the slowest worker's TAT
(runs.csv); on the simulated clock a baseline's is the job's elements at its model's rate
(summary.json ``simulation.baseline_models``: line-rate bound x efficiency), labelled so.
Compute comes from the layers' profile (workloads/layers.py), stretched by the run's
``time_dilation`` and ``size_scale`` as the runner's were. The speedup of SwitchML over a
baseline is the baseline's iteration time over SwitchML's, with the overlap and, beside it,
without (``serial``: compute then one all-reduce of everything). At the paper's 100 Gbit/s and
worker counts, the ring's rows also give the speedup over a ring at the ATE/s the paper
measured for NCCL's (``speedup_over_paper_nccl_ring``): the paper's number, not a model's.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

import methods
from analysis import paper
from analysis.load import Results
from analysis.tables import MissingData
from methods.ring import RING
from workloads.kinds.layers import LayerJob, layer_jobs, scaled_layers
from workloads.layers import Layer
from workloads.step_schedule import overlapped_iteration_s, serial_iteration_s

SUBJECT = methods.SWITCHML
"""The method under study (the registry's), whose speedup over each baseline the table gives."""
SWITCHML = SUBJECT.name
BASELINES = tuple(method.name for method in methods.BASELINES)
MEASURED, MODELLED = "measured", "model"


def paper_nccl_ring_iteration_s(layers: Sequence[Layer], jobs: Sequence[LayerJob], n_workers: int, link_mbps: float) -> float | None:
    """The iteration with every job at the NCCL ring's ATE/s the paper states for ``n_workers``
    (analysis/paper.py), at the paper's link rate only; None elsewhere."""
    rate = paper.NCCL_RING_ATE_PER_S.get(n_workers)
    if link_mbps != paper.LINK_MBPS or rate is None:
        return None
    comm = [0.0] * len(layers)
    for job in jobs:
        comm[job.layer] += job.elements / rate
    return overlapped_iteration_s(layers, comm)


def runs_layer_steps(runs: pd.DataFrame) -> list[str]:
    """The ``run`` ids whose jobs differ in size within one point and method: a training
    iteration's layers, one job each (workload ``layers``)."""
    sizes = runs.groupby(["run", "point", "method"])["elements"].nunique()
    return sorted(set(sizes[sizes > 1].index.get_level_values("run")))


def point_workloads(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Each point's workload section, from the run's resolved config.yaml and its sweep."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    sweep = config.get("sweep") or {}
    if not sweep:
        return {0: config["workload"]}
    section, _, key = sweep["param"].partition(".")
    if section != "workload":
        raise MissingData(f"{run_dir}: a training-step figure needs a sweep of the workload, not of {sweep['param']}")
    return {index: {**config["workload"], key: value} for index, value in enumerate(sweep["values"])}


def training_step_table(results: Results) -> pd.DataFrame:
    """Per model and baseline: iteration times and SwitchML's speedup, with and without overlap."""
    if len(results.summary) != 1:
        raise MissingData("a training-step figure is drawn from one run")
    run = results.summary.iloc[0]
    run_dir = Path(run["path"])
    summary = json.loads((run_dir / "summary.json").read_text())
    models = summary.get("simulation", {}).get("baseline_models", {})
    runs = results.runs
    rows = []
    for point, workload in point_workloads(run_dir).items():
        layers, jobs = scaled_layers(workload), layer_jobs(workload)
        at_point = runs[runs["point"] == point]
        if at_point.empty:
            continue
        times: dict[str, tuple[float, float, str, float]] = {}
        for method in (SWITCHML, *BASELINES):
            comm = [0.0] * len(layers)
            model = models.get(str(point), {}).get(method)
            if model is not None:
                for job in jobs:
                    comm[job.layer] += job.elements / model["ate_per_s"]
                source = f"{MODELLED} ({model['model']}, efficiency {model['efficiency']:g})"
            else:
                tats = at_point[at_point["method"] == method].groupby("repetition")["tat_s"].max()
                if len(tats) != len(jobs):
                    continue
                for job, tat in zip(jobs, tats.sort_index()):
                    comm[job.layer] += tat
                source = MEASURED
            times[method] = (overlapped_iteration_s(layers, comm), serial_iteration_s(layers, comm), source, sum(comm))
        if SWITCHML not in times:
            continue
        n_workers, link_mbps = int(at_point["n_workers"].iloc[0]), float(at_point["link_mbps"].iloc[0])
        nccl = paper_nccl_ring_iteration_s(layers, jobs, n_workers, link_mbps)
        compute = sum(layer.forward_s + layer.backward_s for layer in layers)
        sml_overlap, sml_serial, _, sml_comm = times[SWITCHML]
        for baseline in BASELINES:
            if baseline not in times:
                continue
            overlap, serial, source, comm = times[baseline]
            rows.append({
                "workload": str(at_point["workload"].iloc[0]), "baseline": baseline, "baseline_source": source,
                "n_workers": n_workers, "link_mbps": link_mbps,
                "layers": len(layers), "jobs": len(jobs), "elements": sum(layer.count for layer in layers),
                "compute_s": compute, f"comm_{SWITCHML}_s": sml_comm, "comm_baseline_s": comm,
                f"iteration_{SWITCHML}_s": sml_overlap, "iteration_baseline_s": overlap,
                "speedup": overlap / sml_overlap,
                f"serial_iteration_{SWITCHML}_s": sml_serial, "serial_iteration_baseline_s": serial,
                "serial_speedup": serial / sml_serial,
                "speedup_over_paper_nccl_ring": nccl / sml_overlap if baseline == RING.name and nccl is not None else float("nan"),
                "time_dilation": float(workload["time_dilation"]), "size_scale": float(workload["size_scale"]),
            })
    if not rows:
        raise MissingData(f"no model was run with both {SUBJECT.label} and a baseline")
    return pd.DataFrame(rows)
