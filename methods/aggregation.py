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

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

import numpy as np

from base.plugin import resolve
from protocol.quantize import ExpectedSum


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


class HostCore(Protocol):
    """One rank's worker of a protocol without sockets or a clock (sans-IO): what the simulated
    clock's generic driver (simulation/host.py) runs, handing it the frames that reached its
    host and sending the frames it returns (whole Ethernet frames: a protocol over UDP puts
    its own headers on, as a host's kernel would). Built once per rank as ``core(spec, rank,
    host, switch)`` (the worker spec, protocol/worker_spec.py; the host's and the aggregating
    switch's addresses, each with ``mac`` and ``ipv4``) and given one all-reduce after another."""

    def start(self, tensor: np.ndarray, now: float) -> tuple[Sequence[bytes], float | None]:
        """Begin an all-reduce of ``tensor`` at ``now``: the frames to send, and when to be
        woken if no frame arrives first (None: only when one does)."""

    def step(self, now: float, received: Sequence[bytes]) -> tuple[Sequence[bytes], float | None]:
        """The frames that reached the host by ``now`` (none: it was woken at its time): the
        frames to send, and when to wake it next."""

    hold_s: float
    """How long the host's socket loop lets frames gather after the last ``step`` before it
    takes the next ones (0: at once): the driver hands the core nothing, and fires no timer,
    until then, as the loop sleeps (ATP's worker after a small batch on a shaped link)."""

    @property
    def done(self) -> bool:
        """Whether the all-reduce has its whole result."""

    def outcome(self) -> tuple[np.ndarray, np.ndarray | None, Any]:
        """The finished all-reduce: (values, the switch's raw integer sum or None, its
        ``hosts.stats.JobStats``; the driver sets ``tat_s``)."""


class ServerCore(Protocol):
    """One of a job's server hosts (``Aggregation.servers_per_job``: ATP's parameter server)
    without sockets or a clock: what the simulated clock runs on the host it attaches for it
    (simulation/host.py, ``ServerHost``). Built as ``server_core(spec, index, host, switch)``
    (the job's worker spec, which of its servers, the host's and the aggregating switch's
    addresses); it answers the frames that reach its host as they arrive, and has no timers."""

    def receive(self, now: float, received: Sequence[bytes]) -> Sequence[bytes]:
        """The frames that reached the host at ``now``: the whole Ethernet frames to send."""

    def stats(self) -> Mapping[str, int]:
        """Its counts so far, by name (ATP's PS: full and partial sums, collided sequences, ...)."""


@dataclass(frozen=True)
class PoolSharing:
    """How a protocol's jobs on one switch spend its memory: a shared pool that every job
    hashes into (ATP's), or a static partition that gives each job its own range (SwitchML's),
    which the switch can refuse. The shared-switch kind asks it for each job's ``share`` of a
    register budget and for the jobs' admission before anything starts."""

    registers_per_unit: int = 1
    """Registers of k values one unit of a job's pool takes (SwitchML's slot: two shadow copies)."""
    partition: str | None = None
    """"module:attribute" of ``(pools, max_pool_size) -> Any``, with ``pools`` (job id, pool size)
    per job: raises a ValueError naming the jobs when one switch cannot hold their pools side by
    side; None: the jobs share one pool, each up to all of it."""

    def share(self, budget: int, jobs: int) -> int:
        """Each of ``jobs`` jobs' pool, in the protocol's unit, out of ``budget`` registers of k
        values: all of it in a shared pool, else an equal range (at least one unit)."""
        if self.partition is None:
            return budget
        return max(1, budget // (self.registers_per_unit * jobs))

    def admit(self, pools: Sequence[tuple[int, int]], max_pool_size: int) -> None:
        """The jobs' pools held side by side on a switch of ``max_pool_size`` (``partition``), or
        in a shared pool each within it; a ValueError naming the jobs that do not fit."""
        if self.partition is not None:
            resolve(self.partition)(pools, max_pool_size)
            return
        larger = [f"{pool} (job {job_id})" for job_id, pool in pools if pool > max_pool_size]
        if larger:
            raise ValueError(f"pools of {', '.join(larger)} are larger than the switch's shared pool of {max_pool_size} (switch.max_pool_size)")


class Server(Protocol):
    """One of a job's server hosts in emulation (``Aggregation.server``): the same server as
    its ``ServerCore``, on sockets. Built as ``server(spec, index)`` (the job's worker spec,
    which of its servers), serving from then on; hosts/server.py runs it in its host's process
    and hands its counts to the runner (network/servers.py)."""

    def run(self, stop: threading.Event) -> Any:
        """Serve until ``stop`` is set (SIGTERM) or its job is done."""

    def counts(self) -> Mapping[str, int]:
        """Its counts so far, by name: the names and meanings of its ``ServerCore.stats()``, so
        that both clocks' protocol_counters.csv rows of a server compare."""

    def close(self) -> None:
        """Its sockets closed."""


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
    program_fabric: str | None = None
    """"module:attribute" of ``(controls, fabric, jobs) -> None`` (switches/fabric.py's
    ``ProgramSwitches``): every switch of an emulated or simulated network programmed for its
    jobs, on whichever target (tables, multicast groups, its forwarding of ordinary traffic,
    the switch's own address). None: it runs on no network yet (only in memory)."""
    switch_address: bool = True
    """Its switch program answers ARP and ping for the aggregating switch's IPv4 address,
    which every host resolves once the switches are programmed; False: the network gives
    every host a static neighbour entry for it instead (a program that answers neither)."""
    drop_simulator: bool = False
    """Its switch program has the drop simulator that emulates link loss where the kernel has
    no netem (``program_fabric`` sets it from ``Fabric.drop_rates``); False: such a network
    refuses a lossy topology for it rather than run it without the loss."""
    servers_per_job: int = 0
    """Hosts each job needs beside its workers (ATP's parameter server), cabled to the
    aggregating switch with the workers' link; the networks add them only for a protocol
    that asks, named and addressed by switches/topology_fabric.py's ``server_stations`` on
    both clocks, and their addresses are the workers' spec's ``servers``."""
    server: str | None = None
    """"module:attribute" of ``server(spec, index) -> Server``: what each of those hosts runs, with
    its job's spec, until its job is done or SIGTERM (``python -m hosts.server`` runs it; index:
    which of the job's servers it is); None when it needs none. ``server_core`` is the same
    server on the simulated clock."""
    waiting_evidence: str | None = None
    """"module:attribute" of ``(control, switch, n_workers) -> {rank: what}``: what the
    aggregating switch's state shows of the ranks a job waits for (switches/switchml/evidence.py's
    ``slots_evidence``), asked at a deadline that passed; None: its state shows nothing."""
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
    event_counters: str | None = None
    """"module:attribute" of ``(control) -> {event: packets}``: a switch's event counters by
    name, which the results record per job; None: its program counts nothing they record."""
    frame_bytes: Callable[[int], int] | None = None
    """The bytes of one of its frames carrying k elements, Ethernet header to last element (what
    its line rate is counted in: a figure's packets per bin at line rate); None: not given."""
    event_notes: tuple[str, ...] = ()
    """Its ingress events (``EV_*``) counted besides a frame's own event, so not frames of their
    own when the switch's frames are accounted (network/port_counters.py's ``account_switch``)."""
    core: str | None = None
    """"module:attribute" of its sans-IO worker core, ``core(spec, rank, host, switch)`` (``HostCore``), which
    the simulated clock's generic driver runs (simulation/host.py); None: the protocol gives
    its own driver (``simulated_host``) or does not run on the simulated clock."""
    simulated_host: str | None = None
    """"module:attribute" of its own driver on the simulated clock, ``(env, spec, rank, host,
    switch, packet_cost_s) -> a simulated host`` (simulation/host.py, ``SimulatedHost``), for a
    protocol whose driver must match a compiled event loop event for event (SwitchML's,
    simulation/switchml/native/); None: the generic driver over ``core``."""
    simulated_loop: str | None = None
    """"module:attribute" of its event loop in C for the simulated clock (simulation/network.py's
    ``NativeLoop``: SwitchML's star.c, simulation/switchml/native/), which runs the networks of
    the shapes it takes when a config's data path is native; None: its workers run on SimPy only."""
    section_defaults: Mapping[str, Any] = field(default_factory=dict)
    """Defaults of its own subsection of the ``protocol`` section (ATP's ``atp``), which only a
    config naming one of its methods gets: a config without it records nothing of it."""
    properties: Mapping[str, Any] = field(default_factory=dict)
    """JSON schema of its own keys of the config's ``protocol`` section (ATP: its ``atp``
    subsection), which experiments/config.py adds to configs/experiment.schema.yaml."""
    expected_sum: Callable[[list[np.ndarray], Any], ExpectedSum] | None = None
    """(all ranks' inputs, its job parameters) -> the exact sum a correct job produces, for a
    protocol that quantizes its own way (methods/verification.py, ``Expected.own``); None:
    SwitchML's quantizer (protocol/quantize.py)."""
    server_core: str | None = None
    """"module:attribute" of the same server on the simulated clock, ``server_core(spec, index,
    host, switch)`` (``ServerCore``); None: its jobs need no server, or it runs none simulated."""

    pool_sharing: PoolSharing = PoolSharing()
    """How its jobs on one switch spend the switch's memory (a shared pool unless it says otherwise)."""

    switch_defaults: Mapping[str, Any] = field(default_factory=dict)
    """Its keys of the config's ``switch`` section that a config may leave out, and their values
    (SwitchML's: the switch memory all jobs share, ``max_pool_size``)."""

    @property
    def simulated(self) -> bool:
        """Whether its jobs run on the simulated clock: its workers (a driver, its own or the
        generic one over its core) and the servers its jobs need (``server_core``)."""
        return (self.simulated_host is not None or self.core is not None) and (self.servers_per_job == 0 or self.server_core is not None)

    def reset(self, controls: Iterable[Any], parameters: JobParameters) -> None:
        """Its state zeroed on each of ``controls`` (switches/control.py's SwitchControl) by
        ``reset_switch``, before its first job on a network."""
        reset = resolve(self.reset_switch)
        for control in controls:
            reset(control, parameters)


@dataclass(frozen=True)
class Job:
    """One in-network job as a network takes it: its protocol, its typed parameters (the job's
    id and pool among them) and its workers' hosts in rank order."""

    aggregation: Aggregation
    parameters: JobParameters
    hosts: tuple[str, ...]
