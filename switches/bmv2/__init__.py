"""The bmv2 target: p4/switchml.p4 compiled by p4c, run by simple_switch, programmed over Thrift.

As a switch target (``TARGET`` below, a switches/target.py descriptor) it runs the P4
build's k and at most its pool size, and ``auto`` prefers it wherever everything it needs
is installed (most machines lack it: the Vagrant VM has it)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from typing import Any, Mapping

from protocol import params
from switches.target import DataPlane, SwitchTarget

EXECUTABLES = ("simple_switch", "p4c")
PYTHON_MODULES = {
    "p4utils": "p4utils",
    "bm_runtime": "bmv2's Thrift Python bindings (bm_runtime, installed with bmv2)",
    "thrift": "the Thrift Python library (python3-thrift)",
}
"""Importable module -> how to name it when it is missing."""


def detect() -> list[str]:
    """What bmv2 needs and this machine lacks (empty when bmv2 can run)."""
    missing = [name for name in EXECUTABLES if shutil.which(name) is None]
    missing += [label for module, label in PYTHON_MODULES.items() if importlib.util.find_spec(module) is None]
    return missing


def data_plane(ports: Mapping[int, str], log_dir: Path, *, name: str, k: int, max_pool_size: int, **options: Any) -> DataPlane:
    """simple_switch on ``ports`` (``options``: Bmv2Process.for_ports's)."""
    from switches.bmv2.process import Bmv2Process

    return Bmv2Process.for_ports(ports, log_dir, name=name, k=k, max_pool_size=max_pool_size, **options)


def node_class() -> type:
    from switches.bmv2.node import Bmv2SwitchNode

    return Bmv2SwitchNode


TARGET = SwitchTarget(
    name="bmv2",
    needs="simple_switch, p4c and p4-utils with bmv2's Thrift bindings",
    auto_preference=1,
    node_class=node_class,
    data_plane=data_plane,
    describe_build=lambda: shutil.which("simple_switch") or "simple_switch",
    detect=detect,
    unavailable=(
        "needs {problems}, which this machine lacks. The Vagrant VM provides all of them: run `vagrant up` in the "
        "repository and use the testbed inside it (see README, 'Switch targets'), or choose --switch embedded."
    ),
    program="P4 program",
    k_choices=params.K_CHOICES,
    max_pool_size=params.MAX_POOL_SIZE,
)
