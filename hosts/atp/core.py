"""ATP's hosts on the simulated clock: the worker as a ``HostCore`` and the parameter server
as a ``ServerCore`` (methods/aggregation.py), each around its sans-IO core.

What a host's kernel and sockets do for the socket drivers (client.py, server.py), these do
in frames: put the Ethernet/IPv4/UDP headers on each payload (built once: every frame of a
host goes to the same place), and take them off what arrives, dropping and counting a frame
of the wrong size or for another UDP port, as a socket would never see it (``malformed``).
The job (job.py: quantization, the aggregator map and sequences that carry over from one
all-reduce to the next, ``JobStats``) and the loop's policy are the socket worker's: results
first, the timers only when nothing arrived, and after a small batch of results on a shaped
link a hold (``WorkerCore.hold_s``; the driver sleeps through it with ``simulation.worker_holds``).

A worker sends to its PS's IPv4 (``servers[0]``) with the switch's MAC, as a host whose next
hop is the switch: ATP's program matches its senders by port and IPv4 (docs/dataplane-atp.md),
never by destination MAC. The PS sends its results to the switch (``SWITCH_UDP_PORT``).
"""

from __future__ import annotations

import struct
from typing import Any, Sequence

import numpy as np

from hosts.atp.job import WorkerJob, frame_time_s, job_parameters, job_stats, resend_floor
from hosts.atp.parameter_server import ParameterServerCore, server_counts
from hosts.atp.worker import ATPStalled, WorkerCore
from hosts.stats import TIMELINE_BIN_S, JobStats, SendTimeline, timeline_bin_for
from protocol.atp import params
from protocol.atp.packet import ATP_OFFSET, frame_bytes, payload_bytes
from protocol.packet import UDP_OFFSET, Endpoint, build_frame
from protocol.worker_spec import WorkerSpec

UDP_DST_PORT = struct.Struct("!H")
UDP_DST_PORT_OFFSET = UDP_OFFSET + 2


class Framing:
    """Payloads into frames from one endpoint to another, and frames to one UDP port back into payloads."""

    def __init__(self, k: int, source: Endpoint, destination: Endpoint) -> None:
        self._header = build_frame(source, destination, bytes(payload_bytes(k)))[:ATP_OFFSET]
        self._frame_bytes = frame_bytes(k)
        self._port = source.udp_port
        self.malformed = 0
        self.received_bytes = 0

    def frames(self, payloads: Sequence[bytes]) -> list[bytes]:
        header = self._header
        return [header + payload for payload in payloads]

    def payload(self, frame: bytes) -> bytes | None:
        """The UDP payload of a frame for this host's port, or None (counted) for anything else."""
        if len(frame) != self._frame_bytes or UDP_DST_PORT.unpack_from(frame, UDP_DST_PORT_OFFSET)[0] != self._port:
            self.malformed += 1
            return None
        self.received_bytes += len(frame) - ATP_OFFSET
        return frame[ATP_OFFSET:]


class WorkerHostCore:
    """Rank ``rank`` of an ATP job on the simulated clock (``Aggregation.core``)."""

    def __init__(self, spec: WorkerSpec, rank: int, host: Any, switch: Any) -> None:
        parameters = resend_floor(job_parameters(spec, needs_server=True), spec.link_mbps)
        self._job = WorkerJob(parameters, rank, spec.n_workers, spec.job_timeout_s, spec.link_mbps)
        self._framing = Framing(parameters.k, Endpoint(host.mac, host.ipv4, params.WORKER_UDP_PORT),
                                Endpoint(switch.mac, spec.servers[0], params.PS_UDP_PORT))
        self._payload_size = payload_bytes(parameters.k)
        self._seconds_per_element = frame_time_s(parameters.k, spec.link_mbps) / parameters.k if spec.link_mbps else None
        self._core: WorkerCore | None = None
        self._tensor: np.ndarray | None = None
        self._timeline = SendTimeline(0.0)
        self.stalled: str | None = None
        """Why the all-reduce gave up (the core's stall limit), or None: the driver's deadline then ends it."""
        self.hold_s = 0.0
        """How long the socket loop holds after the last step (``WorkerCore.hold_s`` of its batch;
        0 after a timer), so that the simulated worker takes its results in the batches the
        emulated one does."""

    def start(self, tensor: np.ndarray, now: float) -> tuple[list[bytes], float | None]:
        self._tensor = tensor
        self._core = core = self._job.begin(tensor, now)
        self._framing.malformed = self._framing.received_bytes = 0
        per_element = self._seconds_per_element  # the line rate's time sets the timeline's bin (hosts/stats.py)
        self._timeline = SendTimeline(now, TIMELINE_BIN_S if per_element is None else timeline_bin_for(len(tensor) * per_element))
        self.stalled = None
        return self._sent(core.start(now), now), core.next_timer()

    def step(self, now: float, received: Sequence[bytes]) -> tuple[list[bytes], float | None]:
        core, framing = self._core, self._framing
        if self.stalled is not None:
            return [], None
        out: list[bytes] = []
        self.hold_s = 0.0
        if received:
            for frame in received:
                payload = framing.payload(frame)
                if payload is not None:
                    out += core.receive(payload, now)
            self.hold_s = core.hold_s(len(received))
        else:
            due = core.next_timer()
            if due is not None and due <= now:
                try:
                    out = core.expire(now)
                except ATPStalled as exc:
                    self.stalled = str(exc)
                    return [], None
        return self._sent(out, now), core.next_timer()

    def _sent(self, payloads: list[bytes], now: float) -> list[bytes]:
        if payloads:
            self._timeline.record(now, len(payloads))
        return self._framing.frames(payloads)

    @property
    def done(self) -> bool:
        return self._core is not None and self._core.finished

    def outcome(self) -> tuple[np.ndarray, np.ndarray, JobStats]:
        values, int_sum = self._job.values(self._tensor, self._core)
        return values, int_sum, job_stats(self._core, self._payload_size, self._timeline.bins, self._framing.malformed,
                                          self._framing.received_bytes, {})


class ServerHostCore:
    """Server ``index`` of an ATP job on the simulated clock (``Aggregation.server_core``): its
    parameter server, answering each part the switch forwards as it arrives (it has no timers)."""

    def __init__(self, spec: WorkerSpec, index: int, host: Any, switch: Any) -> None:
        if index != 0:
            raise ValueError(f"an ATP job has one parameter server (index 0), not index {index}")
        parameters = job_parameters(spec)
        self.core = ParameterServerCore.for_job(parameters, spec.n_workers)
        self._framing = Framing(parameters.k, Endpoint(host.mac, host.ipv4, params.PS_UDP_PORT),
                                Endpoint(switch.mac, switch.ipv4, params.SWITCH_UDP_PORT))
        self._results_sent = 0

    def receive(self, now: float, received: Sequence[bytes]) -> list[bytes]:
        out: list[bytes] = []
        for frame in received:
            payload = self._framing.payload(frame)
            if payload is not None:
                out += self.core.receive(payload)
        self._results_sent += len(out)
        return self._framing.frames(out)

    def stats(self) -> dict[str, int]:
        """Its core's counts, the results sent, the frames dropped (``server_counts``, as hosts/atp/server.py's)."""
        return server_counts(self.core.stats, self._results_sent, self._framing.malformed)
