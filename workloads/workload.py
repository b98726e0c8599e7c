"""What the testbed knows about a workload kind, in one frozen record per kind.

A config's ``workload.kind`` names one of these records (the registry in
``workloads/kinds/__init__.py``). The config loader reads its keys, defaults and checks,
the runner its inputs and its experiment kind, the pace check whether its jobs have a pace,
and the worker its host loop, so that none of them decides on a kind's name and a new
workload is one file in ``workloads/kinds/`` plus one registry line. This package sits
beside methods and topologies: it imports only ``base`` and ``protocol``, never ``hosts``
(the host loop is a "module:function" string that ``hosts/worker.py`` resolves) nor
``experiments`` (the experiment kind is named, and experiments/kinds/ looks it up).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

COMMON_KEYS = frozenset({"kind", "dtype", "seed", "time_dilation"})
"""Keys every workload kind accepts (configs/experiment.schema.yaml defines them)."""


@dataclass(frozen=True)
class WorkloadInfo:
    name: str
    elements: int
    """Elements one all-reduce of it carries (0 where only its run counts them: a user's script)."""
    compute_s: float
    """Per-iteration compute time times the workload's time_dilation and size_scale (0 for synthetic)."""


Check = Callable[[Mapping[str, Any], int, str], None]
"""(resolved config, number of workers, label) -> None, or a ConfigError naming the key."""


def no_check(data: Mapping[str, Any], n_workers: int, source: str) -> None:
    """A workload whose keys the schema checks fully."""


@dataclass(frozen=True)
class Workload:
    name: str
    """As written in configs (``workload.kind``)."""
    properties: Mapping[str, Any]
    """JSON-schema properties of the keys only this kind accepts (experiments/config.py adds
    them to the schema; a key two kinds share must be defined alike in both)."""
    describe: Callable[[Mapping[str, Any]], WorkloadInfo]
    """Its name, elements per all-reduce and dilated compute time, from a resolved section."""
    host: str
    """"module:function" each worker process runs, as ``function(spec, rank, spec_path)``:
    the loop that answers the runner's commands (hosts/worker.py resolves it)."""
    experiment: str
    """The name of the experiment kind that runs it (experiments/kinds/)."""
    rank_program: str | None = None
    """"module:attribute" of what one rank does around each all-reduce, ``cls(spec, rank,
    load)`` (hosts/rank.py's ``RankProgram``): the host loop runs it on an emulated host, the
    simulated clock in the runner's process; None for hosts that run a loop of their own
    (PyTorch's), which only emulation runs."""
    required: tuple[str, ...] = ()
    """Its keys a config must give."""
    defaults: Mapping[str, Any] = field(default_factory=dict)
    """Its keys' defaults, under what the config gives."""
    inputs: Callable[[Mapping[str, Any], int], list[np.ndarray]] | None = None
    """(section, workers) -> one flat tensor per rank, deterministic in (seed, rank); None for
    a workload whose hosts compute their own (a training's gradients)."""
    check: Check = no_check
    """Rules over several keys, which the schema cannot say clearly."""
    unavailable: Callable[[], str | None] = lambda: None
    """Why it cannot run on this machine (an optional dependency absent), or None."""
    plans_without_it: bool = False
    """Whether ``describe`` and ``check`` need no more than this machine has where ``unavailable``
    says what it lacks, so that a dry run plans it (a DDP script's) rather than refusing."""
    through_ddp: bool = False
    """Its all-reduces are PyTorch DDP's buckets: it runs only methods that have a DDP hook."""
    paced: bool = True
    """Its jobs are all-reduces back to back, whose pace the network sets (experiments/pace.py);
    False where a user's code computes between them."""

    @property
    def keys(self) -> frozenset[str]:
        """Every key a section of this kind may hold."""
        return COMMON_KEYS | frozenset(self.properties)
