"""A SwitchML worker on the simulated clock: ``WorkerCore``'s steps, driven by SimPy's events.

``SimulatedWorker.allreduce`` is a SimPy process that does what ``AllReduceJob.run``
(hosts/switchml/job.py) does with a socket and the wall clock: the core's ``start`` and
``step`` decide (WorkerCore.step), the process does their I/O. It sends what a step wrote,
waits as the step says (for a result or until ``wake_at``; or holds until ``wake_at``),
takes every result that has arrived (at most a batch of ``BATCH_PER_POOL`` pools, as one
recvmmsg) and hands them to the next step. The job's packets, timers, retransmissions and
statistics are therefore the core's own.

The host's network stack is an ideal NIC plus ``packet_cost_s`` of processing per packet
received or sent (default 0): a batch of B results and the S packets they release keep
the worker busy for (B + S) * packet_cost_s before those packets reach the link. The
kernel's receive buffer is not modelled (a worker loses no result to an overflow).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Generator

import numpy as np
import simpy

from hosts.switchml.core import (BATCH_PER_POOL, RUNNING, SEQ_MASK, TIMED_OUT, AllReduceResult, JobArrays, JobContext, SwitchMLTimeout,
                                 WorkerCore, job_result, missing_slots, prepare_tensor)
from hosts.switchml.native.job import SML_DONE, NativeRoundTrip, job_stats, job_struct, slot_arrays
from hosts.switchml.pool import SlotPool
from hosts.switchml.timers import RetransmitPolicy
from hosts.stats import JobStats, timeline_bin_for
from protocol.packet import build_frame, Endpoint
from protocol.switchml import params
from protocol.switchml.packet import frame_bytes, payload_bytes, SWITCHML_OFFSET
from simulation.link import Link
from simulation.network import HostFactory
from switches.fabric import Station


@dataclass(frozen=True)
class NativeAllReduce:
    """One all-reduce of a worker made ready for worker.c's core (simulation/switchml/native/star.c):
    ``job`` is its struct sml_job, pointing into ``keep``."""

    job: object
    arrays: JobArrays
    values: np.ndarray | None
    quantized: bool
    length: int
    t0: float
    seq_base: int
    timeline_bin_s: float
    keep: tuple


@dataclass(frozen=True)
class WorkerSetup:
    """What a SwitchMLClient is constructed with, for a worker in a simulation."""

    rank: int
    n_workers: int
    job_id: int
    k: int
    pool_size: int
    retransmit: RetransmitPolicy
    deadline_s: float
    packet_cost_s: float = 0.0


def frame_header(src: Endpoint, dst: Endpoint, k: int) -> bytes:
    """The Ethernet/IPv4/UDP headers the host's kernel puts in front of every SwitchML
    payload of k elements from ``src`` to ``dst`` (the same for every packet: UDP checksum 0)."""
    return build_frame(src, dst, bytes(payload_bytes(k)))[:SWITCHML_OFFSET]


class SimulatedWorker:
    """One host's SwitchML worker; ``allreduce`` may be run any number of times (one at a
    time), with shadow sets and sequence numbers continuing as in SwitchMLClient."""

    def __init__(self, env: simpy.Environment, setup: WorkerSetup, host: Endpoint, switch: Endpoint) -> None:
        if setup.packet_cost_s < 0:
            raise ValueError(f"a host's per-packet cost must be >= 0 s, got {setup.packet_cost_s}")
        self._env = env
        self._setup = setup
        self._ctx = JobContext(rank=setup.rank, n_workers=setup.n_workers, job_id=setup.job_id, policy=setup.retransmit,
                               deadline_s=setup.deadline_s)
        self._pool = SlotPool(setup.pool_size, setup.k)
        self._next_seq = 0
        self._batch = BATCH_PER_POOL * setup.pool_size
        self._tx = np.zeros(self._batch, dtype=self._pool.packets.dtype)
        self._record_bytes = self._tx.dtype.itemsize
        self.header = frame_header(host, switch, setup.k)
        """The Ethernet/IPv4/UDP headers of every frame it sends."""
        self._inbox: deque[bytes] = deque()
        self._arrival: simpy.Event | None = None
        self.uplink: Link | None = None
        """The link towards the switch (the network connects it)."""
        self._native_rtt: NativeRoundTrip | None = None
        """worker.c's round-trip estimate, carried across the native all-reduces of this worker."""

    @classmethod
    def at(cls, env: simpy.Environment, setup: WorkerSetup, host: Station, switch: Station) -> SimulatedWorker:
        """The worker on ``host``, sending from its worker port to ``switch``'s aggregation port."""
        return cls(env, setup, Endpoint(host.mac, host.ipv4, params.WORKER_UDP_PORT), Endpoint(switch.mac, switch.ipv4, params.UDP_PORT_BASE))

    @property
    def packet_cost_s(self) -> float:
        return self._setup.packet_cost_s

    def deliver(self, frames: list[bytes]) -> None:
        """Frames that reached the host (the downlink's far end): queued for the next receive."""
        self._inbox.extend(frames)
        arrival = self._arrival
        if arrival is not None and not arrival.triggered:
            arrival.succeed()

    def _send(self, count: int) -> None:
        header, send, size = self.header, self.uplink.send, self._record_bytes
        records = self._tx[:count].tobytes()
        for at in range(0, count * size, size):
            send(header + records[at:at + size])

    def _take(self) -> tuple[np.ndarray, np.ndarray]:
        """Up to one batch of arrived results as records and their UDP payload lengths."""
        inbox, size = self._inbox, self._record_bytes
        count = min(len(inbox), self._batch)
        if not count:  # a timer woke the worker
            return self._tx[:0], np.zeros(0, dtype=np.int64)
        payloads = [inbox.popleft()[SWITCHML_OFFSET:] for _ in range(count)]
        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=count)
        if (lengths != size).any():  # a runt or an oversized frame: the core counts it as a duplicate
            payloads = [p[:size].ljust(size, b"\0") for p in payloads]
        return np.frombuffer(b"".join(payloads), dtype=self._tx.dtype), lengths

    def _busy(self, packets: int) -> simpy.Event | None:
        cost = self._setup.packet_cost_s * packets
        return self._env.timeout(cost) if cost > 0 else None

    def _timeline_bin(self, elements: int) -> float:
        """The send timeline's bin for a job of ``elements``: 10 ms, or finer for a job that
        takes less than 20 of them at the uplink's rate (1.4 ms for 16 MiB at 100 Gbit/s)."""
        frames = -(-elements // self._setup.k)
        return timeline_bin_for(frames * frame_bytes(self._setup.k) * self.uplink.seconds_per_byte)

    def allreduce(self, tensor: np.ndarray) -> Generator[simpy.Event, object, AllReduceResult | SwitchMLTimeout]:
        """Sum ``tensor`` over the job's workers (a SimPy process: ``env.process(w.allreduce(x))``);
        its value is the AllReduceResult, with the TAT in simulated seconds, or the
        SwitchMLTimeout of a job that missed its deadline (returned, not raised: SimPy
        rebuilds an exception that escapes a process from its args alone, which a
        SwitchMLTimeout's are not)."""
        env, setup = self._env, self._setup
        t0 = env.now
        x, exponents = prepare_tensor(tensor, setup.k)
        core = WorkerCore(self._pool, self._ctx, x, exponents, self._next_seq, t0, self._tx, self._timeline_bin(len(x)))
        self._next_seq = (self._next_seq + core.plan.total_packets) & SEQ_MASK
        if len(x):
            try:
                yield from self._run(core, t0)
            except SwitchMLTimeout as timeout:
                return timeout
        result = job_result(core.int_sum, core.e_max, None, exponents is not None, setup.n_workers, setup.k, len(x), core.stats)
        result.stats.tat_s = env.now - t0
        return result

    def _run(self, core: WorkerCore, t0: float) -> Generator[simpy.Event, object, None]:
        """job.py's AllReduceJob.run on the simulated clock: the core's steps, with the
        links and SimPy's events."""
        env = self._env
        now = env.now
        step = core.start(now)
        received = 0
        while True:
            if (busy := self._busy(received + step.send)) is not None:
                yield busy
            self._send(step.send)
            if step.status != RUNNING:
                break
            wait = step.wake_at - env.now
            if step.on_arrival:
                if wait > 0 and not self._inbox:  # poll: a result, or the timeout
                    self._arrival = env.event()
                    yield self._arrival | env.timeout(wait)
                    self._arrival = None
            elif wait > 0:  # a hold
                yield env.timeout(wait)
            rx, lengths = self._take()
            received = len(rx)
            now = env.now
            step = core.step(now, rx, lengths)
        if step.status == TIMED_OUT:
            raise SwitchMLTimeout(self._ctx.job_id, self._ctx.rank, now - t0, core.missing())
        core.stats.timeline = core.timeline

    # -- the same all-reduce by worker.c's core, driven by simulation/switchml/native/star.c ---------

    def native_allreduce(self, tensor: np.ndarray, now: float) -> NativeAllReduce:
        """``tensor``'s all-reduce, released at ``now``, as worker.c's struct: prepared as
        ``allreduce`` prepares the Python core's (the same tensor, exponents, sequence numbers
        and timeline bin), for star.c's loop to run."""
        setup = self._setup
        if self._native_rtt is None:
            self._native_rtt = NativeRoundTrip()
        x, exponents = prepare_tensor(tensor, setup.k)
        arrays = JobArrays.make(x, exponents, self._pool, setup.n_workers)
        values = np.zeros(arrays.plan.n_chunks * setup.k, dtype=np.float32) if arrays.quantized else None
        slots = slot_arrays(arrays.plan.n_slots, self._batch)
        tx = np.zeros(self._batch, dtype=self._tx.dtype)
        rx = np.zeros(self._batch, dtype=self._tx.dtype)
        rx_lengths = np.zeros(self._batch, dtype=np.uint32)
        timeline_bin_s = self._timeline_bin(len(x))
        job = job_struct(arrays, values, slots, self._pool, self._ctx, self._native_rtt, self._next_seq, now, timeline_bin_s,
                         tx, rx, rx_lengths)
        prepared = NativeAllReduce(job, arrays, values, exponents is not None, len(x), now, self._next_seq, timeline_bin_s,
                                   (slots, tx, rx, rx_lengths))
        self._next_seq = (self._next_seq + arrays.plan.total_packets) & SEQ_MASK
        return prepared

    def native_result(self, prepared: NativeAllReduce, status: int, end: float) -> AllReduceResult | SwitchMLTimeout:
        """What ``allreduce`` returns, from the struct star.c ran to ``status`` at simulated ``end``."""
        setup, arrays = self._setup, prepared.arrays
        if status != SML_DONE:
            return SwitchMLTimeout(setup.job_id, setup.rank, end - prepared.t0, missing_slots(arrays.outstanding, self._pool.shadow_set,
                                                                                              prepared.seq_base))
        stats = JobStats(timeline_bin_s=prepared.timeline_bin_s)
        job_stats(prepared.job, stats)
        result = job_result(arrays.int_sum, arrays.e_max, prepared.values, prepared.quantized, setup.n_workers, setup.k,
                            prepared.length, stats)
        result.stats.tat_s = end - prepared.t0
        return result


def workers(setup_of: Callable[[int], WorkerSetup | None]) -> HostFactory:
    """A network's SwitchML workers, built with it from each host's setup (by index; None: no
    worker): ``JobSetup.worker`` of a network made by hand (the tests', the labs' benchmarks)."""

    def build(env: simpy.Environment, index: int, host: Station, switch: Station) -> SimulatedWorker | None:
        setup = setup_of(index)
        return None if setup is None else SimulatedWorker.at(env, setup, host, switch)

    return build
