"""In-network aggregation protocols as a plug-in axis: one record per protocol.

A protocol spans the layers (its wire format in ``protocol/<p>/``, its worker in
``hosts/<p>/``, its data planes in ``switches/<target>/<p>/``), so what the rest of the testbed
must know of it is said once, here, in an ``Aggregation`` record that the methods registry
lists (``methods.AGGREGATIONS``) and a method refers to (``Method.aggregation``). The runner,
the networks, the results and the config schema ask that record: which k it carries, what
its workers' spec holds, which worker loop runs, how a switch is readied for its first job,
which DDP backend it gives. They never decide "in-network" from which fields a method has.

Host and switch code is named by "module:attribute" strings (``base.plugin.resolve``), as
``Method.host`` is, so this record stays below the layers whose code it points at.
docs/architecture.md, "In-network aggregation", says where each piece of a protocol lives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol


@dataclass(frozen=True)
class DataPath:
    """Which implementation of a protocol's worker loop runs, and the one line that says why."""

    name: str
    """``native`` or ``python``."""
    reason: str


class DataPathUnavailable(RuntimeError):
    """The data path a config insists on (``protocol.data_path: native``) cannot run here; the message says why."""


class JobParameters(Protocol):
    """What every protocol's typed job parameters give the runner: the switch's part of them."""

    k: int
    """Elements per packet (the schema's ``protocol.k``)."""
    pool_size: int
    """Switch memory one job uses, in the protocol's own unit (slots, aggregators)."""
    job_id: int


class Pace(Protocol):
    """The fastest a job can go when only the network sets its pace (experiments/pace.py)."""

    tat_s: float
    ate_per_s: float
    streaming_fraction: float
    """Share of tat_s its data packets' own intervals take (the rest: start and drain)."""
    window_bound: bool


PaceModel = Callable[[int, "JobParameters", float, float, bool], Pace]
"""(elements, the job's parameters, link_bps, link_delay_s, quantized) -> the network's pace
for one job: each protocol reads what sets its pace from its own parameters (SwitchML: k and
the pool's slots)."""


@dataclass(frozen=True)
class Aggregation:
    """One in-network aggregation protocol, as everything outside its own folders sees it."""

    name: str
    """The protocol's name: its folders (``hosts/<name>/``, ...), what targets declare they run
    (``SwitchTarget.protocols``)."""
    label: str
    """How a run's header names its worker ("SwitchML worker: the native data path")."""
    parameters: Callable[[Mapping[str, Any], str], JobParameters]
    """(the config's ``protocol`` section, the resolved data path) -> its typed job parameters,
    which its workers' spec carries (protocol/worker_spec.py)."""
    read_parameters: Callable[[Mapping[str, Any]], JobParameters]
    """Its job parameters from the worker spec's JSON (the worker's side of ``parameters``)."""
    k_choices: tuple[int, ...]
    """The k its packets can carry: the config schema's enum of ``protocol.k``."""
    defaults: Mapping[str, Any]
    """Its keys of the config's ``protocol`` section that a config may leave out, and their values
    (its k and pool size among them)."""
    sum_bits: int
    """Width of the integer sums its switches compute (training_steps.csv ``bits``)."""
    host: str
    """"module:attribute" of the worker class a rank runs (``cls(spec, rank)``, hosts/allreduce.py)."""
    reset_switch: str
    """"module:attribute" of ``(control, parameters) -> None``: a switch's protocol state
    zeroed before the first job on a network (its workers start from an empty pool)."""
    pace: PaceModel | None = None
    """Its pace model where its links and pool alone set its pace; None: only its bound is known."""
    data_path: str | None = None
    """"module:attribute" of ``(choice) -> DataPath``: which implementation of its worker's loop
    a config's ``protocol.data_path`` runs here (native or python); None: it has one loop."""
    tool_versions: str | None = None
    """"module:attribute" of ``(data path name) -> {tool: version}``: the tools its workers were
    built with on that data path (the native loop's C compiler), for a run's provenance."""
    client: str | None = None
    """"module:attribute" of ``(spec, rank) -> client``: the client of the switch its DDP backend
    and hook all-reduce through (hosts/torch_backend.py, ``SwitchClient``); None: none."""
    ddp_hook: str | None = None
    """"module:attribute" of its PyTorch DDP communication hook (hosts/torch_hook.py); None: none."""
    torch_backend: str | None = None
    """The torch.distributed backend name a DDP script gets through it (hosts/torch_backend.py); None: none."""
    switch_defaults: Mapping[str, Any] = field(default_factory=dict)
    """Its keys of the config's ``switch`` section that a config may leave out, and their values
    (SwitchML's: the switch memory all jobs share, ``max_pool_size``)."""
