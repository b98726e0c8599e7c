"""The ATP worker's protocol, without I/O: UDP payloads and time in, payloads to send out.

``WorkerCore`` is one all-reduce of one worker's int32 values (protocol/atp/quantize.py makes
them from floats). The caller hands it results and the time and sends what it returns; a
socket loop, a simulated clock or a test drives the same code (hosts/switchml/core.py's
style). The worker, not the switch, picks each packet's aggregator (``AggregatorMap``).

Sending: packet p (sequence seq_base + p) may leave once p < done_through + window, where
done_through is the first packet without a result; the window never exceeds the map's W
positions, so p and p + W, which share an aggregator, are never in flight together.
Loss: a result beyond a hole resends the hole once (cause "gap"); once a packet has waited
``resend_timeout_s`` for its result (``first_resend_timeout_s`` at least while no result of the
all-reduce has come), a timeout resends the first and the last overdue packet and restarts every
waiting packet's timer (cause "timeout"; ``expire`` says why); no progress for ``stall_s`` raises
ATPStalled. Resends carry FLAG_RESEND: they never claim and flush their own partial sum.
Congestion: with ``congestion_control`` the window follows AIMD on the ECN results echo,
once per window of packets: halved if any result of the window was marked, else one more.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hosts.atp.aggregators import AggregatorMap
from protocol.atp import params
from protocol.atp.packet import SEQ_LIMIT, ATPHeader, decode_payload, encode_payload
from protocol.atp.packet import MAX_K
from protocol.quantize import dequantize, quantize

DEFAULT_RESEND_TIMEOUT_S = 0.005
DEFAULT_STALL_S = 20.0
"""The authors' worker gives up after 20 s without progress."""
DEFAULT_FIRST_RESEND_TIMEOUT_S = 0.050
"""The least a worker waits before resending while no result of its all-reduce has come: the
authors' worker waits 50 ms before its first result (200 us after). The first results wait for
every worker's first packets, and workers released together start apart (processes sharing
cores); a worker that resends its window before the last one has started flushes every
aggregator it filled to the PS, with every other worker's resends beside it, and the job
spends hundreds of milliseconds reassembling (benchmarks/README.md, "ATP's ECN, its start and
its capacity")."""


HOLD_SHARE = 0.5
"""After a small batch of results the socket loop lets the next ones gather for this share of
the time the window takes to cross the worker's link, so that one wake-up takes several
results (a wake-up costs about as much for one as for thirty). The other half of the window
stays queued on the link and covers what the worker does not measure: the path's own round
trip through the PS (four links) and a worker's wait for a core. SwitchML holds three quarters
of the queueing it measures (hosts/switchml/core.py; benchmarks/README.md, "Why a worker
holds"); three quarters of ATP's window cost rate at 50 Mbit/s (benchmarks/README.md, "ATP's
timeouts and wake-ups")."""
HOLD_BELOW_SHARE = 0.9
"""Only batches smaller than this share of the window make the loop hold: a worker whose CPU
is the bottleneck gets whole windows, and holding would slow it further."""
HOLD_MAX_S = 0.010
"""The longest hold: one bin of the send timeline, as SwitchML's."""


class ATPStalled(RuntimeError):
    """No result advanced the all-reduce for ``stall_s``."""


@dataclass(frozen=True)
class WorkerConfig:
    """Who the worker is in its job, and its protocol's knobs; fixed for the job's life."""

    app_id: int
    worker_id: int
    n_workers: int
    k: int
    resend_timeout_s: float = DEFAULT_RESEND_TIMEOUT_S
    stall_s: float = DEFAULT_STALL_S
    first_resend_timeout_s: float = DEFAULT_FIRST_RESEND_TIMEOUT_S
    congestion_control: bool = True
    frame_s: float = 0.0
    """How long a frame takes on the job's slowest link; 0 where links are not shaped (the loop never holds)."""

    def __post_init__(self) -> None:
        if not 1 <= self.n_workers <= params.MAX_WORKERS or not 0 <= self.worker_id < self.n_workers:
            raise ValueError(f"ATP worker {self.worker_id} of {self.n_workers}: need 0 <= id < n <= {params.MAX_WORKERS}")
        if not 0 <= self.app_id <= 0xFFFF:
            raise ValueError(f"ATP app_id must be 0..65535, got {self.app_id}")
        if not 1 <= self.k <= MAX_K:
            raise ValueError(f"ATP packets carry 1..{MAX_K} values, got k = {self.k}")
        if self.frame_s < 0:
            raise ValueError(f"a frame's time on the link must be >= 0, got {self.frame_s} s")
        if not 0 < self.resend_timeout_s < self.stall_s or not 0 <= self.first_resend_timeout_s < self.stall_s:
            raise ValueError(f"need 0 < resend timeout ({self.resend_timeout_s} s) < stall limit ({self.stall_s} s) "
                             f"and 0 <= first resend timeout ({self.first_resend_timeout_s} s) < stall limit")


@dataclass
class WorkerStats:
    packets_sent: int = 0
    resends_gap: int = 0
    resends_timeout: int = 0
    results: int = 0
    duplicates: int = 0
    """Results for packets that already had one."""
    ignored: int = 0
    """Datagrams that are not a result of this job's all-reduce (malformed, another job or tensor)."""
    collisions_adopted: int = 0
    ecn_results: int = 0
    window_halvings: int = 0
    cwnd: list[float] = field(default_factory=list)
    """The window after each AIMD step."""


class WorkerCore:
    """One worker's all-reduce of ``values`` (int32) as sequences seq_base .. seq_base + P - 1.

    ``scale``: a float32 job's scale (protocol/atp/quantize.py's ``job_scale``; ``values``
    float32, within the job's bound, which the caller checked): each packet is quantized as it
    is sent and each result dequantized as it arrives, so that the float tensor is ready when
    the last result comes (``values``). None: an int32 job, sent and summed as it is. Done in
    whole-tensor passes before the first packet and after the last result, they held every
    worker of a job sharing cores for tens of milliseconds at both ends (benchmarks/README.md,
    "ATP's ends")."""

    def __init__(self, config: WorkerConfig, aggregators: AggregatorMap, values: np.ndarray, seq_base: int, now: float,
                 scale: float | None = None) -> None:
        wanted = np.int32 if scale is None else np.float32
        if values.dtype != wanted:
            raise TypeError(f"an ATP worker {'with' if scale is not None else 'without'} a scale sends {np.dtype(wanted)} values, "
                            f"not {values.dtype}")
        k = config.k
        self.config = config
        self._map = aggregators
        self.n_packets = n_packets = max(1, math.ceil(len(values) / k))
        if not 1 <= seq_base or seq_base + n_packets > SEQ_LIMIT:
            raise ValueError(f"sequences {seq_base}..{seq_base + n_packets - 1} leave ATP's 1..2^32-1")
        self.seq_base = seq_base
        self.length = len(values)
        if len(values) == n_packets * k and values.flags.c_contiguous:
            chunks = values.reshape(n_packets, k)  # whole packets already: a view, never written, so no copy before the first packet
        else:
            chunks = np.zeros((n_packets, k), dtype=wanted)
            chunks.reshape(-1)[: len(values)] = values
        self._chunks = chunks
        self._sums = np.zeros((n_packets, k), dtype=np.int32)
        self.scale = None if scale is None else np.float64(scale)
        self._values = None if scale is None else np.zeros((n_packets, k), dtype=np.float32)
        self._done = np.zeros(n_packets, dtype=bool)
        self._sent_at = np.full(n_packets, np.inf)
        self._gap_resent = np.zeros(n_packets, dtype=bool)
        self.done_through = 0
        """The first packet without a result: all before it are done."""
        self.next_packet = 0
        """The first packet never sent."""
        self.cwnd = float(aggregators.positions)
        self._marker = -1
        """AIMD acts when every packet up to this one has its result."""
        self._ecn_in_window = False
        self._last_progress = now
        self.stats = WorkerStats()

    # -- what the driver asks -------------------------------------------------------------

    @property
    def finished(self) -> bool:
        return self.done_through == self.n_packets

    @property
    def result(self) -> np.ndarray:
        """The int32 sums, valid once ``finished``."""
        return self._sums.reshape(-1)[: self.length]

    @property
    def values(self) -> np.ndarray | None:
        """The sums dequantized with ``scale`` (float32), valid once ``finished``; None without a scale."""
        return None if self._values is None else self._values.reshape(-1)[: self.length]

    @property
    def window(self) -> int:
        positions = self._map.positions
        return min(positions, max(1, int(self.cwnd))) if self.config.congestion_control else positions

    @property
    def resend_timeout_s(self) -> float:
        """How long a packet waits for its result before it is resent: the config's, and no less
        than ``first_resend_timeout_s`` until the all-reduce's first result."""
        config = self.config
        return config.resend_timeout_s if self.stats.results else max(config.resend_timeout_s, config.first_resend_timeout_s)

    def hold_s(self, received: int) -> float:
        """How long the socket loop lets results gather after a batch of ``received`` datagrams
        (HOLD_SHARE of the window's time on the link, at most HOLD_MAX_S): 0 on unshaped links,
        after a batch of most of a window, and once less than a window is left to send (the
        results then awaited are the job's last, and a hold would only add to its TAT)."""
        window = self.window
        if not self.config.frame_s or received >= HOLD_BELOW_SHARE * window or self.n_packets - self.next_packet < window:
            return 0.0
        return min(HOLD_SHARE * window * self.config.frame_s, HOLD_MAX_S)

    def next_timer(self) -> float | None:
        """When ``expire`` is next due (None once finished)."""
        if self.finished:
            return None
        flight = self._sent_at[self.done_through:self.next_packet]
        resend = float(flight.min()) + self.resend_timeout_s if len(flight) else math.inf
        return min(resend, self._last_progress + self.config.stall_s)

    # -- sending --------------------------------------------------------------------------

    def start(self, now: float) -> list[bytes]:
        """The first window."""
        out = self._fill(now)
        self._marker = self.next_packet - 1
        return out

    def _payload(self, packet: int, flags: int) -> bytes:
        config = self.config
        header = ATPHeader(1 << config.worker_id, config.n_workers, flags, config.app_id, self.seq_base + packet,
                           self._map.index(packet), params.NO_INDEX)
        chunk = self._chunks[packet]
        return encode_payload(header, chunk if self.scale is None else quantize(chunk, self.scale))

    def _fill(self, now: float) -> list[bytes]:
        out = []
        limit = min(self.n_packets, self.done_through + self.window)
        while self.next_packet < limit:
            out.append(self._payload(self.next_packet, 0))
            self._sent_at[self.next_packet] = now
            self.next_packet += 1
        self.stats.packets_sent += len(out)
        return out

    def _resend(self, packets: np.ndarray, now: float) -> list[bytes]:
        self._sent_at[packets] = now
        self.stats.packets_sent += len(packets)
        return [self._payload(int(p), params.FLAG_RESEND) for p in packets]

    def expire(self, now: float) -> list[bytes]:
        """A timeout: resend the first and the last overdue packet (cause "timeout"), let every
        overdue packet be resent once more on a gap, and restart the timer of every packet
        waiting. The first is the one holding the window (TCP resends the first segment not
        acknowledged on a timeout, RFC 6298); the last is a probe, whose result reveals by
        the gap rule which packets before it were lost (RACK-TLP's probe, RFC 8985), while
        results that come before it show they were only late. Resending every overdue packet
        instead made a stall on shared cores a storm: each worker resent its window, and the
        switch passes resends to the PS (hosts/atp/README.md, "Timers")."""
        if self.finished:
            return []
        if now - self._last_progress >= self.config.stall_s:
            raise ATPStalled(f"ATP worker {self.config.worker_id} of job {self.config.app_id}: no result for "
                             f"{self.config.stall_s:g} s, {self.n_packets - self.done_through} packets missing")
        start = self.done_through
        flight = self._sent_at[start:self.next_packet]
        overdue = start + np.flatnonzero(flight + self.resend_timeout_s <= now)  # a packet with its result is never due (inf)
        if not len(overdue):
            return []
        self._gap_resent[overdue] = False
        flight[np.isfinite(flight)] = now
        probes = np.unique(overdue[[0, -1]])
        self.stats.resends_timeout += len(probes)
        return self._resend(probes, now)

    # -- receiving ------------------------------------------------------------------------

    def receive(self, payload: bytes, now: float) -> list[bytes]:
        """Take one datagram; returns what to send because of it. A result for a packet not sent
        yet is ignored: no correct PS can have it (it needs this worker's part), and taking it
        would resend, as a gap, every packet before it, however far beyond the window."""
        decoded = decode_payload(payload, self.config.k)
        packet = -1
        if decoded is not None:
            header, values = decoded
            packet = header.seq - self.seq_base
            if not header.flags & params.FLAG_ACK or header.app_id != self.config.app_id or not 0 <= packet < self.next_packet:
                packet = -1
        if packet < 0:
            self.stats.ignored += 1
            return []
        if self._done[packet]:
            self.stats.duplicates += 1
            return []
        self._done[packet] = True
        self._sent_at[packet] = np.inf
        self._sums[packet] = values
        if self._values is not None:
            self._values[packet] = dequantize(values, self.scale)
        self.stats.results += 1
        self._last_progress = now
        if header.flags & params.FLAG_COLLISION and self._map.adopt(packet, header.new_agtr):
            self.stats.collisions_adopted += 1
        if header.flags & params.FLAG_ECN:
            self.stats.ecn_results += 1
            self._ecn_in_window = True
        out = self._resend_gap(packet, now)
        while self.done_through < self.n_packets and self._done[self.done_through]:
            self.done_through += 1
        if self.done_through > self._marker:
            self._adjust_window()
        out += self._fill(now)
        return out

    def _resend_gap(self, packet: int, now: float) -> list[bytes]:
        """A result beyond packets still waiting: resend each of them once (cause "gap")."""
        start = self.done_through
        if packet <= start:
            return []
        hole = start + np.flatnonzero(~self._done[start:packet] & ~self._gap_resent[start:packet])
        self._gap_resent[hole] = True
        self.stats.resends_gap += len(hole)
        return self._resend(hole, now)

    def _adjust_window(self) -> None:
        """AIMD, once per window of packets (every packet up to the marker has its result)."""
        if self.config.congestion_control:
            if self._ecn_in_window:
                self.cwnd = max(1.0, self.cwnd / 2)
                self.stats.window_halvings += 1
            else:
                self.cwnd = min(float(self._map.positions), self.cwnd + 1)
            self.stats.cwnd.append(self.cwnd)
        self._ecn_in_window = False
        self._marker = min(self.n_packets, self.done_through + self.window) - 1  # the window about to be sent ends here
