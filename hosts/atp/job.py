"""One rank's succession of ATP all-reduces, whatever drives it: what carries over from one
all-reduce to the next (the aggregator map, which collisions re-point, and the sequence
space, which keeps counting), the quantization around each, and its ``JobStats``.

The socket worker (client.py) and the simulated clock's core (core.py) both run a job
through this, so that the two differ only in their I/O.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

import methods
from hosts.atp.aggregators import AggregatorMap
from hosts.atp.worker import DEFAULT_FIRST_RESEND_TIMEOUT_S, DEFAULT_STALL_S, WorkerConfig, WorkerCore
from hosts.stats import JobStats
from protocol.atp.job import ATPParameters
from protocol.atp.packet import frame_bytes
from protocol.atp.quantize import check_within, flushed_to_zero, job_scale
from protocol.worker_spec import WorkerSpec


def job_parameters(spec: WorkerSpec, needs_server: bool = False) -> ATPParameters:
    """The spec's ATP job; ValueError when it has none, or (``needs_server``: a worker's) names no parameter server."""
    if spec.protocol is None:
        raise ValueError(f"method {spec.method}'s spec has no protocol section: no ATP job")
    if needs_server and not spec.servers:
        raise ValueError(f"method {spec.method}'s spec names no parameter server (servers): ATP needs one per job")
    return methods.by_name(spec.method).aggregation.read_parameters(spec.protocol)


def frame_time_s(k: int, link_mbps: float) -> float:
    """How long one of ATP's frames of ``k`` values takes to cross a link of ``link_mbps``."""
    return 8 * frame_bytes(k) / (link_mbps * 1e6)


def resend_floor(parameters: ATPParameters, link_mbps: float | None) -> ATPParameters:
    """The job's parameters with the resend timeout raised, on rate-limited links, to twice
    the time a full window of frames takes to cross the slowest link (SwitchML's floor,
    hosts/switchml/method.py): below it a worker's own queue makes its last packets look
    lost, and it resends a window it just sent."""
    if link_mbps is None:
        return parameters
    window_drain_ms = parameters.window * frame_time_s(parameters.k, link_mbps) * 1e3
    return replace(parameters, resend_timeout_ms=max(parameters.resend_timeout_ms, 2 * window_drain_ms))


class WorkerJob:
    """Rank ``rank`` of ``n_workers`` in the ATP job ``parameters`` describe, given no more
    than ``job_deadline_s`` per all-reduce (it stalls before that); ``link_mbps``: the slowest
    link's rate, where links are shaped (the socket loop's hold, ``WorkerCore.hold_s``)."""

    def __init__(self, parameters: ATPParameters, rank: int, n_workers: int, job_deadline_s: float,
                 link_mbps: float | None = None) -> None:
        self.parameters = parameters
        self.config = WorkerConfig(app_id=parameters.job_id, worker_id=rank, n_workers=n_workers, k=parameters.k,
                                   resend_timeout_s=parameters.resend_timeout_s,
                                   stall_s=max(min(DEFAULT_STALL_S, job_deadline_s), 2 * parameters.resend_timeout_s,
                                               2 * DEFAULT_FIRST_RESEND_TIMEOUT_S),
                                   congestion_control=parameters.congestion_control,
                                   frame_s=frame_time_s(parameters.k, link_mbps) if link_mbps else 0.0)
        self._map = AggregatorMap(parameters.job_id, parameters.window, parameters.pool_size)
        self._next_seq = 1

    def begin(self, tensor: np.ndarray, now: float) -> WorkerCore:
        """The core of the next all-reduce of ``tensor`` (1-D float32 within 2^exponent, or
        int32), quantized with the job's scale; ValueError naming a value beyond the bound,
        before anything is sent."""
        x = np.ascontiguousarray(tensor)
        if x.ndim != 1:
            raise ValueError(f"allreduce takes a 1-D tensor, got shape {x.shape}")
        if x.dtype == np.int32:
            core = WorkerCore(self.config, self._map, x, self._next_seq, now)  # refuses sequences beyond 32 bits
        else:  # float32: refused here, naming the value, if beyond the bound; quantized packet by packet as the core sends
            if x.dtype != np.float32:
                raise TypeError(f"ATP aggregates float32 or int32 tensors, not {x.dtype}")
            check_within(x, self.parameters.exponent)
            core = WorkerCore(self.config, self._map, x, self._next_seq, now, job_scale(self.parameters.exponent, self.config.n_workers))
        self._next_seq += core.n_packets
        return core

    def flushed(self, tensor: np.ndarray) -> int:
        """How many nonzero elements of ``tensor``, once all-reduced, the job's scale rounded to 0."""
        return flushed_to_zero(tensor, self.parameters.exponent, self.config.n_workers)

    def values(self, tensor: np.ndarray, core: WorkerCore) -> tuple[np.ndarray, np.ndarray]:
        """A finished all-reduce's (values, int32 sum): the sum itself for an int32 tensor, else
        what the core dequantized as the results came. Both are the finished core's own arrays,
        not copies: a copy of the sum at the end of the job (11.8 MB at 50 Mbit/s) took eight
        workers sharing two cores up to 115 ms, most of what ATP's ranks lost at the end of a job
        (benchmarks/README.md, "ATP's timeouts and wake-ups")."""
        int_sum = core.result
        return (int_sum if core.values is None else core.values), int_sum


def job_stats(core: WorkerCore, payload_size: int, timeline: list[int], malformed: int, received_bytes: int,
              socket_errors: dict[str, int]) -> JobStats:
    """A finished all-reduce's ``JobStats`` (without ``tat_s``), ATP's own counts in ``protocol``
    (hosts/atp/README.md, "Per-job statistics"); ``timeline``: packets sent per bin
    (``SendTimeline.bins``); ``malformed``: datagrams of the wrong size, dropped before the core."""
    s = core.stats
    return JobStats(
        packets_sent=s.packets_sent, packets_received=s.results + s.duplicates + s.ignored + malformed,
        retransmissions=s.resends_gap + s.resends_timeout, timeouts=s.resends_timeout, duplicates=s.duplicates,
        bytes_sent=s.packets_sent * payload_size, bytes_received=received_bytes, timeline=timeline,
        socket_errors=socket_errors, rejected_results=s.ignored + malformed,
        protocol={"collisions_adopted": s.collisions_adopted, "resends_gap": s.resends_gap, "resends_timeout": s.resends_timeout,
                  "ecn_results": s.ecn_results, "window_halvings": s.window_halvings, "ignored": s.ignored, "malformed": malformed,
                  "cwnd_last": core.window},
    )
