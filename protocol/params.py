"""The testbed's parameters that every in-network aggregation protocol shares.

Where the tree, its builds and its results are; the aggregating switch's own address on the
emulation subnet; the reader of a P4 program's ``#define`` constants; and the one conversion
of link rates from the Mbit/s they are written in to the bit/s the models take. Each
protocol's own parameters (its ports, pool, k and counters) are in ``protocol/<p>/params.py``
(docs/architecture.md, "In-network aggregation").
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, TypeVar

from switchml_testbed import __version__
from switchml_testbed.release import is_checkout

REPO_ROOT = Path(__file__).resolve().parent.parent
"""The testbed's tree: a checkout, or its copy inside site-packages/switchml_testbed."""
P4_DIR = REPO_ROOT / "p4"
BUILD_DIR = (REPO_ROOT / "build" if is_checkout()
             else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "switchml-testbed" / __version__)
"""Where compiled programs are cached: the checkout's build/, or the user's cache folder for
an installed tree (site-packages is not ours to write into, and may not be writable)."""
RESULTS_DIR = REPO_ROOT / "results" if is_checkout() else Path("results")
"""Where a run's folder goes unless --out names one: the checkout's results/, or results/ in
the current folder for an installed tree."""

_DEFINE = re.compile(r"^\s*#define\s+([A-Z][A-Z0-9_]*)\s+(0[xX][0-9a-fA-F]+|\d+)\b", re.M)


def read_p4_constants(path: Path) -> Mapping[str, int]:
    """Every integer ``#define`` in ``path``, by name (first definition wins, as with #ifndef):
    a protocol's Python side reads its P4 program's constants file so the two never disagree."""
    constants: dict[str, int] = {}
    for name, literal in _DEFINE.findall(path.read_text()):
        constants.setdefault(name, int(literal, 0))
    return MappingProxyType(constants)


MAX_WORKERS = 32
"""The most workers one switch aggregates for one job, whatever its protocol: every protocol's
switch program keeps a bitmap of 32 bits per slot or aggregator (each one's parameters check
at import that its program takes this many). A topology's fan-in (topologies/model.py) and the
synthetic workload's int32 range (workloads/synthetic.py) are sized for it."""


def check_max_workers(protocol: str, max_workers: int, source: Path) -> None:
    """A protocol's most workers per switch (``source``'s constant), refused when below ``MAX_WORKERS``."""
    if max_workers < MAX_WORKERS:
        raise RuntimeError(f"{source}: {protocol}'s switch aggregates at most {max_workers} workers, "
                           f"fewer than the {MAX_WORKERS} every topology may give it (protocol/params.py, MAX_WORKERS)")


SWITCH_MAC = "02:53:4d:4c:00:01"
"""Virtual MAC of the aggregating switch: workers address their updates to it (and results come from it)."""
SWITCH_IPV4 = "10.0.0.254"
"""Virtual IPv4 of the aggregating switch, on the workers' 10.0.0.0/24 emulation subnet."""


BITS_PER_MBIT = 1e6
"""Mbit/s as tc, the topologies (``bw_mbps``) and the results (``link_mbps``) count them: SI, not 2^20."""

Rate = TypeVar("Rate")
"""A float, or an array or pandas Series of them."""


def mbps_to_bps(mbps: Rate) -> Rate:
    """A link rate in bit/s, what the models and timers take, from the Mbit/s configs and results write."""
    return mbps * BITS_PER_MBIT
