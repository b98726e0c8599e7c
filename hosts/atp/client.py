"""ATPClient: one worker of an ATP job over UDP, ``WorkerCore`` driven by the wall clock.

Addresses. A worker sends its packets to its job's parameter server (the PS's address, UDP
port ``PS_UDP_PORT``); the aggregating switch intercepts them on the way. Results come back
from the switch (the address the PS sent them to, port ``SWITCH_UDP_PORT``) to the worker's
``WORKER_UDP_PORT``, on a socket connected to the switch, whose kernel filter drops every
datagram from anyone else (hosts/atp/sockets.py).

The loop is SwitchML's (hosts/switchml/job.py), in Python (``_run``) or, where the job's
``data_path`` resolves to native, in C (hosts/atp/native/worker.c, the same loop on the same
core's state): one recvmmsg takes every waiting result, the
core answers each, one sendmmsg sends what it wrote, and after a small batch on a shaped link
it holds a while so that the next results come together (``WorkerCore.hold_s``); with nothing
waiting it fires the due timers and sleeps in poll until the next timer, a result or the deadline. A datagram of the
wrong size is counted (``malformed``) and dropped before the core; the core counts and drops
the rest of what is not its job's result (``ignored``). Nothing a datagram says can end the
loop early or make it wait longer than its deadline.

Workers of one job make the same sequence of all-reduce calls (the same lengths): sequence
numbers keep counting from call to call, and the aggregator map keeps what collisions
re-pointed. After a job that failed (a timeout) the next one needs no reset: its sequences
are new, so an aggregator the failed one still holds only makes them collide to the PS. So
one client serves a whole training (a DDP backend's, hosts/atp/ddp_client.py), every bucket
of every step one all-reduce of the same job, the one parameter server answering them all.
"""

from __future__ import annotations

import logging
import math
import select
import time
from dataclasses import dataclass

import numpy as np

from hosts.atp.job import WorkerJob, job_stats
from hosts.atp.native import resolve
from hosts.atp.native.job import NativeCore
from hosts.atp.worker import WorkerCore
from hosts.atp.sockets import PayloadSockets
from hosts.mmsg import errno_counts
from hosts.stats import TIMELINE_BIN_S, JobStats, SendTimeline
from protocol.atp import params
from protocol.atp.job import ATPParameters

log = logging.getLogger(__name__)

BATCH_PER_WINDOW = 2
"""Datagrams one batch may hold, per window position: a window of results and as many duplicates."""
DEFAULT_JOB_DEADLINE_S = 60.0


class ATPTimeout(TimeoutError):
    """A job did not complete within its deadline."""


@dataclass
class ATPResult:
    """The aggregated tensor (float32 dequantized, or int32), the int32 sum it came from, and what it took."""

    values: np.ndarray
    int_sum: np.ndarray
    stats: JobStats


class ATPClient:
    """One worker (``rank`` of ``n_workers``) of the ATP job ``parameters`` describe."""

    def __init__(self, rank: int, n_workers: int, parameters: ATPParameters, ps: tuple[str, int], switch: tuple[str, int], *,
                 bind_ipv4: str = "0.0.0.0", bind_port: int = params.WORKER_UDP_PORT,
                 job_deadline_s: float = DEFAULT_JOB_DEADLINE_S, data_path: str = "python", link_mbps: float | None = None) -> None:
        if job_deadline_s <= 0:
            raise ValueError(f"job_deadline_s must be positive, got {job_deadline_s}")
        self.parameters = parameters
        self.data_path = resolve(data_path)
        """Which loop runs (``protocol.data_path`` resolved: hosts/atp/native's worker.c, or ``_run``)."""
        self._job = WorkerJob(parameters, rank, n_workers, job_deadline_s, link_mbps)
        self._config = self._job.config
        self._deadline_s = job_deadline_s
        self._io = PayloadSockets(parameters.k, BATCH_PER_WINDOW * parameters.window, (bind_ipv4, bind_port), ps, switch)
        self._poller = select.poll()
        self._poller.register(self._io.receiving, select.POLLIN)
        log.info("ATP job %d rank %d runs %s", parameters.job_id, rank, self.data_path.reason)

    @property
    def rank(self) -> int:
        return self._config.worker_id

    @property
    def n_workers(self) -> int:
        return self._config.n_workers

    @property
    def address(self) -> tuple[str, int]:
        """Local (IPv4, UDP port) results must be sent to."""
        return self._io.receiving.getsockname()

    def allreduce(self, tensor: np.ndarray) -> ATPResult:
        """Sum ``tensor`` (1-D float32 within 2^exponent, or int32) over the job's workers.

        float32 is quantized with the job's scale (protocol/atp/quantize.py; a value beyond
        the bound raises ValueError naming it, before anything is sent); int32 is summed
        with 32-bit wrap-around. Raises ATPTimeout past the deadline, ATPStalled
        (hosts/atp/worker.py) when no result comes for its stall limit."""
        started = time.perf_counter()
        core = self._job.begin(tensor, started)
        stats = self._run_native(core, started) if self.data_path.name == "native" else self._run(core, started)
        values, int_sum = self._job.values(tensor, core)
        stats.tat_s = time.perf_counter() - started
        log.debug("rank %d: all-reduce of %d %s elements in %.4f s: %s", self._config.worker_id, core.length, tensor.dtype, stats.tat_s,
                  stats)
        return ATPResult(values=values, int_sum=int_sum, stats=stats)

    def flushed(self, inputs: np.ndarray, result: ATPResult) -> int:
        """How many nonzero elements of this rank's ``inputs`` to ``result`` the job's scale
        rounded to 0 (none for int32): what a DDP backend reports (hosts/torch_backend.py)."""
        return self._job.flushed(inputs)

    def _run(self, core: WorkerCore, started: float) -> JobStats:
        """The loop: results in batches, timers when idle, until every packet has its result."""
        io, poller = self._io, self._poller
        refusals_before = io.refusals
        timeline = SendTimeline(started)
        malformed = received_bytes = 0
        deadline = started + self._deadline_s
        now = time.perf_counter()  # after quantizing (WorkerJob.begin): when the first window leaves
        self._send(core.start(now), now, timeline)
        while not core.finished:
            count = io.rx.receive()
            now = time.perf_counter()
            if count == 0:
                due = core.next_timer()
                if due is not None and due <= now:
                    self._send(core.expire(now), now, timeline)
                if now >= deadline:
                    raise ATPTimeout(f"ATP job {self._config.app_id} rank {self._config.worker_id}: no result after "
                                     f"{now - started:.3f} s for {core.n_packets - core.done_through} of {core.n_packets} packets")
                due = core.next_timer()
                wake = deadline if due is None else min(due, deadline)
                poller.poll(max(0, math.ceil((wake - now) * 1000)))
                continue
            received_bytes += int(io.rx.lengths[:count].sum())
            out: list[bytes] = []
            for i in range(count):
                payload = io.payload(i)
                if payload is None:
                    malformed += 1
                    continue
                out += core.receive(payload, now)
            self._send(out, now, timeline)
            hold = core.hold_s(count)
            if hold:
                time.sleep(hold)
        return job_stats(core, io.size, timeline.bins, malformed, received_bytes, errno_counts(io.refusals - refusals_before))

    def _run_native(self, core: WorkerCore, started: float) -> JobStats:
        """``_run``'s loop in C (hosts/atp/native/worker.c), on the same core's state and sockets."""
        native = NativeCore(core, started, self._deadline_s, TIMELINE_BIN_S)
        try:
            bins, refusals = native.run(self._io)
        except TimeoutError:
            raise ATPTimeout(f"ATP job {self._config.app_id} rank {self._config.worker_id}: no result after "
                             f"{time.perf_counter() - started:.3f} s for {core.n_packets - core.done_through} of {core.n_packets} packets") from None
        self._io.rx.refusals.update(refusals)
        return job_stats(core, self._io.size, bins, native.malformed, native.received_bytes, errno_counts(refusals))

    def _send(self, payloads: list[bytes], now: float, timeline: SendTimeline) -> None:
        if payloads:
            self._io.send(payloads)
            timeline.record(now, len(payloads))

    def close(self) -> None:
        self._io.close()

    def __enter__(self) -> ATPClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
