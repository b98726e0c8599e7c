"""Where a run's numbers came from: summary.json's ``provenance`` (docs/results-format.md).

A figure is only as reproducible as the code, the tools and the machine behind it. The
testbed's version and commit (and whether the tree had uncommitted changes) say which code
ran; the kernel, and the versions of the tools the run used (Mininet, bmv2, p4c, the
compilers, PyTorch), which environment; the link rate and where it came from (a target's
shipped rate or the config), which calibration; the command line, how to run it again.
The analysis prints this for every run it draws, and will not mix commits in one figure
unless told to (analysis/provenance.py).
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from typing import Any

from base.optional import torch_unavailable
from base.plugin import resolve
from experiments.config import Experiment
import methods
from switches.targets import REGISTRY
from switchml_testbed import __version__
from switchml_testbed.release import commit
from workloads.kinds import workload_of


def at_start() -> dict[str, Any]:
    """What can change while a run goes on, taken when it starts: the commit, dirty flag and changes
    of the tree that runs, and the command line that started it."""
    at = commit()
    return {
        "version": __version__,
        "commit": at.sha if at else None,
        "dirty": at.dirty if at else None,
        "changes": at.changes if at else None,
        "command": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
        "cwd": os.getcwd(),
    }


def package_version(name: str) -> str | None:
    """An installed Python distribution's version, read from its metadata (not imported)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def uses_torch(experiment: Experiment) -> bool:
    """Whether a method or the workload of some point needs PyTorch (gloo, a DDP training)."""
    needs = [methods.by_name(m).unavailable for p in experiment.points for m in p.methods]
    needs += [workload_of(p.workload).unavailable for p in experiment.points]
    return torch_unavailable in needs


def tool_versions(experiment: Experiment, target: str, simulated: bool) -> dict[str, str | None]:
    """The versions of the tools this run used (None: used, but its version unknown)."""
    tools: dict[str, str | None] = {}
    if not simulated:
        tools["mininet"] = package_version("mininet")
        tools |= REGISTRY[target].tool_versions()
    for point in experiment.points:  # the in-network workers' own tools (the native loop's compiler: worker.c, or star.c that includes it)
        for protocol in methods.aggregations_of(point.methods):
            if protocol.tool_versions is not None:
                tools |= resolve(protocol.tool_versions)(point.data_path_of(protocol).name)
    if uses_torch(experiment):
        tools["torch"] = package_version("torch")
    return tools


def record(started: dict[str, Any], experiment: Experiment, target: str, simulated: bool) -> dict[str, Any]:
    """summary.json's ``provenance``: ``started`` (``at_start``), the machine, the tools and
    the link rate the run used."""
    first = experiment.points[0]
    return {
        **started,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "clock": "simulated" if simulated else "emulated",
        "switch_target": target,
        "tools": tool_versions(experiment, target, simulated),
        "link_rate": {"mbps": first.topology.link_mbps, "source": experiment.link_rate_source},
    }
