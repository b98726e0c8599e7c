"""A user's own DDP script, one rank per host (hosts/ddp_script.py,
experiments/kinds/ddp_script.py): the testbed counts its all-reduces as it runs, and its
compute between them means its jobs have no network pace to check."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from base.optional import torch_unavailable
from base.yamlschema import ConfigError
from workloads.kinds.training import check_training
from workloads.workload import Workload, WorkloadInfo


def describe(workload: Mapping[str, Any]) -> WorkloadInfo:
    """Its elements are counted as it runs (runs.csv), not known before."""
    return WorkloadInfo(name="ddp_script", elements=0, compute_s=0.0)


def check(data: Mapping[str, Any], n_workers: int, source: str) -> None:
    check_training(data, n_workers, source)
    if not Path(data["workload"]["script"]).is_file():
        raise ConfigError(f"{source}: workload.script: {data['workload']['script']} is not a file")


DDP_SCRIPT = Workload(
    name="ddp_script",
    properties={
        "script": {"type": "string", "description": "ddp_script only: the user's DDP script, run on every host (hosts/ddp_script.py); a relative path is looked for next to the config, then in the current folder (as topology.file)"},
        "args": {"type": "array", "items": {"type": ["string", "number"]},
                 "description": "ddp_script only: the script's command-line arguments ([])"},
    },
    required=("script",),
    defaults={"args": []},
    describe=describe,
    check=check,
    unavailable=torch_unavailable,
    plans_without_it=True,
    through_ddp=True,
    paced=False,
    host="hosts.ddp_script:serve_script",
    experiment="ddp_script",
)
