"""ATP's reference model in memory: n workers' cores, the embedded pipeline, the PS core.

A deterministic discrete-event loop for tests: every frame crosses a link of fixed delay, a
switch egress port serialises at a given rate (its queue is what ATPEgress marks ECN from),
and a ``Faults`` policy may drop, duplicate or delay (reorder) any frame on any hop. Jobs
are programmed through the pipeline's control plane as a network does
(switches/atp/programming.py): sender_table entries for each worker and the PS, a multicast
group of the workers, worker_addr_table entries.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from hosts.atp.aggregators import AggregatorMap
from hosts.atp.parameter_server import ParameterServerCore
from hosts.atp.worker import WorkerConfig, WorkerCore
from protocol.atp import params
from protocol.atp.packet import ATP_OFFSET
from protocol.packet import Endpoint, build_frame
from protocol.params import SWITCH_IPV4, SWITCH_MAC
from switches.atp import programming
from switches.atp.programming import Host
from switches.embedded.atp.pipeline import ATPPipeline
from switches.embedded.control_server import pipeline_handlers
from switches.remote_control import InProcessControl

SWITCH = Endpoint(SWITCH_MAC, SWITCH_IPV4, params.SWITCH_UDP_PORT)
LINK_DELAY_S = 10e-6


@dataclass
class Faults:
    """What happens to a frame on a hop: a list of extra delays, one per copy delivered
    ([] = lost, [0] = on time, [0, 0] = duplicated, [x] = x seconds late, so reordered)."""

    seed: int = 0
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    lose: Callable[[str, bytes], bool] = lambda hop, payload: False
    """A targeted loss on top of the random ones (e.g. the first result of one sequence)."""

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)

    def copies(self, hop: str, payload: bytes) -> list[float]:
        if self.lose(hop, payload) or self._random.random() < self.loss:
            return []
        delays = [self._random.uniform(0, 50 * LINK_DELAY_S) if self._random.random() < self.reorder else 0.0]
        if self._random.random() < self.duplicate:
            delays.append(self._random.uniform(0, 50 * LINK_DELAY_S))
        return delays


def worker_endpoint(app_id: int, worker: int) -> Endpoint:
    return Endpoint(f"02:00:00:00:{app_id:02x}:{worker:02x}", f"10.{app_id}.0.{worker + 1}", params.WORKER_UDP_PORT)


def ps_endpoint(app_id: int) -> Endpoint:
    return Endpoint(f"02:00:00:00:{app_id:02x}:fe", f"10.{app_id}.0.200", params.PS_UDP_PORT)


def program_job(pipeline: ATPPipeline, app_id: int, worker_ports: list[int], ps_port: int) -> None:
    """What a control plane installs for a job (switches/atp/programming.py, through the
    pipeline's own control plane): its senders, its result group, its workers' addresses."""
    control = InProcessControl(pipeline_handlers(pipeline, lambda: {}))
    workers = [Host(port, address.mac, address.ipv4, address.udp_port)
               for port, address in ((port, worker_endpoint(app_id, w)) for w, port in enumerate(worker_ports))]
    ps = ps_endpoint(app_id)
    programming.program_job(control, app_id, workers, Host(ps_port, ps.mac, ps.ipv4))


class FrameSwitch(Protocol):
    """Any target's ATP switch as ATPNetwork drives it (tests/atp_switch_driver.py's drivers):
    a frame in on a port, its copies out, by port."""

    def process(self, in_port: int, frame: bytes) -> list[tuple[int, bytes]]: ...


@dataclass
class Job:
    app_id: int
    workers: list[WorkerCore]
    ps: ParameterServerCore
    worker_ports: list[int]
    ps_port: int

    def endpoint(self, worker: int) -> Endpoint:
        return worker_endpoint(self.app_id, worker)

    @property
    def ps_endpoint(self) -> Endpoint:
        return ps_endpoint(self.app_id)


@dataclass
class ATPNetwork:
    k: int
    pool_size: int
    faults: Faults = field(default_factory=Faults)
    port_rate_bps: float | None = None
    """Each switch egress port's rate; None: frames leave at once (no queue, no ECN)."""
    switch: FrameSwitch | None = None
    """Another target's switch to run instead of the pipeline (tests/atp_switch_driver.py), which
    comes programmed for the jobs' ports: the first job's workers on ports 0.., its PS next."""

    def __post_init__(self) -> None:
        self.pipeline = ATPPipeline(self.k, self.pool_size, self._queue_depth)
        self._process = self.pipeline.process if self.switch is None else self.switch.process
        self.jobs: list[Job] = []
        self.now = 0.0
        self._events: list = []
        self._order = itertools.count()
        self._port_owner: dict[int, tuple[Job, int | None]] = {}
        self._departures: dict[int, list[float]] = {}
        self._timers: dict[tuple[int, int], float] = {}

    # -- building -------------------------------------------------------------------------

    def add_job(self, app_id: int, tensors: list[np.ndarray], *, positions: int = 8, seq_base: int = 1,
                congestion_control: bool = True, resend_timeout_s: float = 0.002) -> Job:
        n = len(tensors)
        first_port = len(self._port_owner)
        workers = [WorkerCore(WorkerConfig(app_id, w, n, self.k, resend_timeout_s=resend_timeout_s, stall_s=5.0,
                                           congestion_control=congestion_control),
                              AggregatorMap(app_id, positions, self.pool_size), tensor, seq_base, 0.0)
                   for w, tensor in enumerate(tensors)]
        job = Job(app_id, workers, ParameterServerCore(app_id, n, self.k, self.pool_size, seed=app_id, window=positions),
                  list(range(first_port, first_port + n)), first_port + n)
        self.jobs.append(job)
        for w, port in enumerate(job.worker_ports):
            self._port_owner[port] = (job, w)
        self._port_owner[job.ps_port] = (job, None)
        if self.switch is None:
            program_job(self.pipeline, app_id, job.worker_ports, job.ps_port)
        return job

    # -- running --------------------------------------------------------------------------

    def _queue_depth(self, port: int) -> int:
        return sum(1 for t in self._departures.get(port, ()) if t > self.now)

    def _at(self, when: float, *event: object) -> None:
        heapq.heappush(self._events, (when, next(self._order), *event))

    def _hop(self, hop: str, payload: bytes, when: float, *event: object) -> None:
        for extra in self.faults.copies(hop, payload):
            self._at(when + LINK_DELAY_S + extra, *event)

    def _from_worker(self, job: Job, w: int, payloads: list[bytes]) -> None:
        for payload in payloads:
            frame = build_frame(job.endpoint(w), job.ps_endpoint, payload)
            self._hop("worker->switch", payload, self.now, "switch", job.worker_ports[w], frame)
        self._arm(job, w)

    def _arm(self, job: Job, w: int) -> None:
        due = job.workers[w].next_timer()
        key = (job.app_id, w)
        if due is not None and due < self._timers.get(key, float("inf")):
            self._timers[key] = due
            self._at(due, "timer", job, w)

    def _switch(self, in_port: int, frame: bytes) -> None:
        for port, out in self._process(in_port, frame):
            leave = self.now
            if self.port_rate_bps:
                queue = self._departures.setdefault(port, [])
                queue[:] = [t for t in queue if t > self.now]
                leave = max([self.now, *queue]) + len(out) * 8 / self.port_rate_bps
                queue.append(leave)
            job, w = self._port_owner[port]
            payload = out[ATP_OFFSET:]
            if w is None:
                self._hop("switch->ps", payload, leave, "ps", job, payload)
            else:
                self._hop("switch->worker", payload, leave, "worker", job, w, payload)

    def run(self, until_s: float = 10.0) -> None:
        """Start every worker and run until all are finished (or ``until_s`` of simulated time)."""
        for job in self.jobs:
            for w, core in enumerate(job.workers):
                self._from_worker(job, w, core.start(self.now))
        while self._events and not all(core.finished for job in self.jobs for core in job.workers):
            when, _, kind, *event = heapq.heappop(self._events)
            if when > until_s:
                break
            self.now = when
            if kind == "switch":
                self._switch(*event)
            elif kind == "ps":
                job, payload = event
                for result in job.ps.receive(payload):
                    frame = build_frame(job.ps_endpoint, SWITCH, result)
                    self._hop("ps->switch", result, self.now, "switch", job.ps_port, frame)
            elif kind == "worker":
                job, w, payload = event
                self._from_worker(job, w, job.workers[w].receive(payload, self.now))
            else:
                job, w = event
                self._timers.pop((job.app_id, w), None)
                core = job.workers[w]
                due = core.next_timer()
                self._from_worker(job, w, core.expire(self.now) if due is not None and due <= self.now else [])
