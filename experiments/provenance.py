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
import shutil
import subprocess
import sys
from typing import Any

from base.optional import torch_unavailable
from experiments.config import Experiment
from hosts.switchml.native import compiler
import methods
from switchml_testbed import __version__
from switchml_testbed.release import commit
from workloads.kinds import workload_of

TOOL_TIMEOUT_S = 10.0


def at_start() -> dict[str, Any]:
    """What can change while a run goes on, taken when it starts: the commit and dirty flag
    of the tree that runs, and the command line that started it."""
    at = commit()
    return {
        "version": __version__,
        "commit": at.sha if at else None,
        "dirty": at.dirty if at else None,
        "command": [os.path.basename(sys.argv[0]), *sys.argv[1:]],
        "cwd": os.getcwd(),
    }


def first_line(argv: list[str]) -> str | None:
    """The first non-empty line ``argv`` prints (a tool's ``--version``); None when the tool is
    missing or fails."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return lines[0] if done.returncode == 0 and lines else None


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
        if target == "bmv2":
            tools["simple_switch"] = first_line(["simple_switch", "--version"])
            tools["p4c"] = first_line(["p4c", "--version"])
        if target == "ebpf":
            tools["clang"] = first_line(["clang", "--version"])
        cc = compiler()
        if cc is not None and any(p.data_path.name == "native" for p in experiment.points):
            tools[f"native worker compiler ({cc})"] = first_line([cc, "--version"])
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
