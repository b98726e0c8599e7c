"""A host's worker on the simulated clock, whatever its protocol: its sans-IO core, driven.

A protocol's record (methods/aggregation.py) names its worker core (``Aggregation.core``, a
``HostCore``: frames in, frames out, the time it wants to be woken). ``CoreHost`` is the
driver that does the I/O for it on SimPy, as a socket loop does on a real host: send what
the core returned, hold as long as the core asks where the host models its socket loop's
sleep after a batch (``simulation.worker_holds``), wait until a frame arrives or the core's
time comes, hand over every frame that arrived, and stop at the job's deadline (the worker
spec's ``job_timeout_s``, in simulated seconds). Nothing of any protocol is here: the toy
protocol of the plug-in tests and ATP run on it as their cores are.

A protocol whose driver must match a compiled event loop event for event gives its own
(``Aggregation.simulated_host``: SwitchML's simulation/switchml/worker.py, which
simulation/switchml/native/star.c mirrors). Either is a ``SimulatedHost`` to the network.
"""

from __future__ import annotations

import functools
from collections import deque
from dataclasses import dataclass
from typing import Any, Generator, Protocol

import numpy as np
import simpy

from base.plugin import resolve
import methods
from protocol.worker_spec import WorkerSpec
from simulation.link import Link
from switches.fabric import Station


class SimulatedHost(Protocol):
    """A host's worker as the simulated network drives it."""

    uplink: Link | None
    """The link towards its switch (the network connects it)."""
    packet_cost_s: float
    """The host's processing per packet it models (0: an ideal host)."""

    def deliver(self, frames: list[bytes]) -> None:
        """Frames that reached the host."""

    def allreduce(self, tensor: np.ndarray) -> Generator[simpy.Event, object, Any]:
        """One all-reduce, as a SimPy process; its value has ``values``, ``int_sum`` and
        ``stats`` (tat_s in simulated seconds), or is the TimeoutError of a missed deadline
        (returned, not raised: SimPy rebuilds an escaping exception from its args alone)."""


@dataclass(frozen=True)
class HostResult:
    """What one all-reduce of a ``CoreHost`` gave."""

    values: np.ndarray
    int_sum: np.ndarray | None
    stats: Any
    """Its ``hosts.stats.JobStats``."""


class HostTimeout(TimeoutError):
    """A worker's all-reduce did not finish by the job's deadline."""


def start_host(env: simpy.Environment, spec: WorkerSpec, rank: int, host: Station, switch: Station,
               packet_cost_s: float = 0.0, holds: bool = False) -> SimulatedHost:
    """Rank ``rank`` of the spec's method on the simulated clock: its protocol's own driver
    (``Aggregation.simulated_host``), else the generic one over its core, which with ``holds``
    sleeps through the holds its core asks for (``HostCore.hold_s``), as the core's socket loop does."""
    aggregation = methods.by_name(spec.method).aggregation
    if aggregation is None or not aggregation.simulated:
        raise ValueError(f"method {spec.method} has no worker on the simulated clock (its record names no core)")
    if aggregation.simulated_host is not None:
        return resolve(aggregation.simulated_host)(env, spec, rank, host, switch, packet_cost_s)
    if packet_cost_s:
        raise ValueError(f"{aggregation.label}'s worker core runs on an ideal host; a host cost per packet is its own driver's")
    return CoreHost(env, resolve(aggregation.core)(spec, rank, host, switch), spec.job_timeout_s, f"{aggregation.label} rank {rank}", holds)


class CoreHost:
    """A ``HostCore`` driven on SimPy: I/O and the deadline only, the protocol in the core."""

    def __init__(self, env: simpy.Environment, core: Any, deadline_s: float, name: str, holds: bool = False) -> None:
        self._env = env
        self._core = core
        self._deadline_s = deadline_s
        self._name = name
        self._holds = holds
        """Whether it sleeps through its core's holds (the socket loop's), or takes every frame as it arrives (an ideal host)."""
        self._inbox: deque[bytes] = deque()
        self._arrival: simpy.Event | None = None
        self.uplink: Link | None = None
        self.packet_cost_s = 0.0
        """An ideal host: the generic driver models no cost per packet."""

    def deliver(self, frames: list[bytes]) -> None:
        self._inbox.extend(frames)
        if self._arrival is not None and not self._arrival.triggered:
            self._arrival.succeed()

    def _send(self, frames: Any) -> None:
        for frame in frames:
            self.uplink.send(frame)

    def allreduce(self, tensor: np.ndarray) -> Generator[simpy.Event, object, HostResult | HostTimeout]:
        env, core = self._env, self._core
        t0 = env.now
        deadline = t0 + self._deadline_s
        frames, wake = core.start(tensor, t0)
        self._send(frames)
        while not core.done:
            if not self._inbox:
                if env.now >= deadline:
                    return HostTimeout(f"{self._name}: no result after {env.now - t0:g} s (simulated)")
                self._arrival = env.event()
                yield self._arrival | env.timeout(max(0.0, min(deadline if wake is None else wake, deadline) - env.now))
                self._arrival = None
            received = list(self._inbox)
            self._inbox.clear()
            frames, wake = core.step(env.now, received)
            self._send(frames)
            if self._holds and core.hold_s and not core.done:
                yield env.timeout(core.hold_s)
        values, int_sum, stats = core.outcome()
        stats.tat_s = env.now - t0
        return HostResult(values, int_sum, stats)


def start_server(env: simpy.Environment, spec: WorkerSpec, index: int, host: Station, switch: Station,
                 packet_cost_s: float = 0.0) -> ServerHost:
    """Server ``index`` of the spec's job (its protocol's ``server_core``, methods/aggregation.py)
    on the simulated clock, at ``host``, taking ``packet_cost_s`` per datagram."""
    aggregation = methods.by_name(spec.method).aggregation
    if aggregation is None or aggregation.server_core is None:
        raise ValueError(f"method {spec.method} runs no server on the simulated clock (its record names no server_core)")
    return ServerHost(env, resolve(aggregation.server_core)(spec, index, host, switch), packet_cost_s)


class ServerHost:
    """A ``ServerCore`` on a host of the simulated network, answering through the host's link
    (a server core has no timers). With no cost per datagram every frame is answered at its
    arrival; with ``packet_cost_s`` the server is one process taking the datagrams one at a
    time, as the emulator's parameter server does: each is answered that long after the
    server is done with the one before."""

    def __init__(self, env: simpy.Environment, core: Any, packet_cost_s: float = 0.0) -> None:
        if packet_cost_s < 0:
            raise ValueError(f"a server's cost per datagram must be >= 0 s, got {packet_cost_s}")
        self._env = env
        self.core = core
        self.uplink: Link | None = None
        self.packet_cost_s = packet_cost_s
        self._free_at = 0.0
        """When the server is done with the datagrams it has taken."""

    def deliver(self, frames: list[bytes]) -> None:
        if not self.packet_cost_s:
            self._answer(frames)
            return
        env = self._env
        for frame in frames:
            self._free_at = max(env.now, self._free_at) + self.packet_cost_s
            env.timeout(self._free_at - env.now).callbacks.append(functools.partial(self._answered, [frame]))

    def _answered(self, frames: list[bytes], _event: simpy.Event) -> None:
        self._answer(frames)

    def _answer(self, frames: list[bytes]) -> None:
        send = self.uplink.send
        for frame in self.core.receive(self._env.now, frames):
            send(frame)
