"""ATP's parameter server, without I/O: what the switch forwards in, results out.

The PS is always on the path. It gets every sum the switch completes, every partial sum a
resend flushes and every packet the switch could not take (collided, resent past an
aggregator it does not own), finishes each sequence's sum, and sends the result, which the
switch multicasts to the job's workers and which frees the aggregator. It deduplicates by
bitmap: a part carrying any bit already counted for its sequence is discarded whole (a sum
cannot be split), so correctness never depends on the switch. A finished sequence's result is
kept, bytes as sent, to answer every later packet of that sequence (a lost result, a resend):
the one byte order is the wire's, built once (the authors' PS byte-swaps its stored sum in
place on each send, so a second send goes out swapped). A sequence any of whose packets
collided gets a new aggregator index in its result: one per old index, drawn from a seeded
shuffle of the pool and remembered, which every worker of the job adopts.

Given the job's window W, it forgets what no worker can still ask for. A worker sends
sequence s (first time or again) only while s is within W of its first packet without a
result, so it holds every result up to s - W. Once every worker has been seen at some
sequence, the results (and unfinished parts) up to the smallest of those minus W go: the PS's
memory stays near a window of results, not the job's whole history.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from protocol.atp import params
from protocol.atp.job import ATPParameters
from protocol.atp.packet import ATPHeader, decode_payload, encode_payload


@dataclass
class PSStats:
    full_sums: int = 0
    """Parts that were a complete switch sum (every bit)."""
    partial_sums: int = 0
    """Parts with some bits: a flushed partial sum, a collided or passed-through packet."""
    discarded: int = 0
    """Parts overlapping bits already counted (duplicates, a flush after a resend passed)."""
    sequences_from_switch: int = 0
    """Sequences finished from one full switch sum."""
    sequences_from_parts: int = 0
    """Sequences the PS assembled from partial sums and single packets."""
    collided_sequences: int = 0
    results_repeated: int = 0
    """Stored results sent again for a packet of a finished sequence."""
    forgotten: int = 0
    """Results and unfinished sequences dropped because no worker can still ask for them."""
    ignored: int = 0
    """Malformed, another job's, a result, bits outside the job, or the float path (unsupported)."""


def server_counts(stats: PSStats, results_sent: int, malformed: int) -> dict[str, int]:
    """A PS's counts by name, as both clocks record them (protocol_counters.csv's server rows):
    its core's, the results it sent, and the frames or datagrams too malformed to reach the core."""
    return {**asdict(stats), "results_sent": results_sent, "malformed": malformed}


@dataclass
class _Sequence:
    total: np.ndarray
    marked: int = 0
    agtr: int = 0
    collided_agtr: int | None = None
    ecn: bool = False
    parts: int = 0


@dataclass
class ParameterServerCore:
    """The PS of job ``app_id`` with ``n_workers`` workers, k values per packet."""

    app_id: int
    n_workers: int
    k: int
    pool_size: int
    seed: int = 0
    window: int | None = None
    """The workers' W: forget what none can still ask for (module docstring); None keeps everything."""
    stats: PSStats = field(default_factory=PSStats)

    @classmethod
    def for_job(cls, parameters: ATPParameters, n_workers: int) -> ParameterServerCore:
        """The PS of the job ``parameters`` describe: its re-pointing seeded by the job's id,
        forgetting with its window (the socket server's and the simulated clock's)."""
        return cls(parameters.job_id, n_workers, parameters.k, parameters.pool_size, seed=parameters.job_id, window=parameters.window)

    def __post_init__(self) -> None:
        self._full = (1 << self.n_workers) - 1
        self._open: dict[int, _Sequence] = {}
        self._results: dict[int, bytes] = {}
        self._shuffled = np.random.default_rng(self.seed).permutation(self.pool_size).tolist()
        self._next_fresh = 0
        self._repointed: dict[int, int] = {}
        self._newest = [0] * self.n_workers
        """Per worker, the highest sequence seen in a part carrying its bit."""

    def receive(self, payload: bytes) -> list[bytes]:
        """Take one datagram from the switch; returns the results to send (to the switch)."""
        decoded = decode_payload(payload, self.k)
        if decoded is None:
            self.stats.ignored += 1
            return []
        header, values = decoded
        bits = header.bitmap
        if (header.app_id != self.app_id or header.flags & (params.FLAG_ACK | params.FLAG_OVERFLOW)
                or not bits or bits & ~self._full):
            self.stats.ignored += 1
            return []
        if self.window is not None:
            self._forget(header.seq, bits)
        stored = self._results.get(header.seq)
        if stored is not None:
            self.stats.results_repeated += 1
            return [stored]
        sequence = self._open.get(header.seq)
        if sequence is None:
            sequence = self._open[header.seq] = _Sequence(np.zeros(self.k, dtype=np.int32))
        if header.flags & params.FLAG_COLLISION:
            sequence.collided_agtr = header.agtr
        sequence.ecn |= bool(header.flags & params.FLAG_ECN)
        if bits & sequence.marked:
            self.stats.discarded += 1
            return []
        if bits == self._full:
            self.stats.full_sums += 1
        else:
            self.stats.partial_sums += 1
        sequence.total += values  # int32 wraps like the switch's adds
        sequence.marked |= bits
        sequence.agtr = header.agtr
        sequence.parts += 1
        if sequence.marked != self._full:
            return []
        del self._open[header.seq]
        result = self._result(header.seq, sequence)
        self._results[header.seq] = result
        return [result]

    def _forget(self, seq: int, bits: int) -> None:
        """Note that the workers of ``bits`` sent ``seq``, and drop every stored result and open
        sequence at or below the oldest sequence some worker could still send, less W."""
        newest = self._newest
        for worker in range(self.n_workers):
            if bits >> worker & 1 and seq > newest[worker]:
                newest[worker] = seq
        limit = min(newest) - self.window
        for table in (self._results, self._open):
            while table:
                oldest = next(iter(table))  # insertion order: sequences finish and open nearly in order
                if oldest > limit:
                    break
                del table[oldest]
                self.stats.forgotten += 1

    def _result(self, seq: int, sequence: _Sequence) -> bytes:
        if sequence.parts == 1:
            self.stats.sequences_from_switch += 1
        else:
            self.stats.sequences_from_parts += 1
        flags = params.FLAG_ACK | (params.FLAG_ECN if sequence.ecn else 0)
        new_agtr = params.NO_INDEX
        if sequence.collided_agtr is not None:
            self.stats.collided_sequences += 1
            new_agtr = self._repoint(sequence.collided_agtr)
            if new_agtr != params.NO_INDEX:
                flags |= params.FLAG_COLLISION
        header = ATPHeader(self._full, self.n_workers, flags, self.app_id, seq, sequence.agtr, new_agtr)
        return encode_payload(header, sequence.total)

    def _repoint(self, old: int) -> int:
        """The index a collided aggregator's positions move to: the same for the same old index,
        else the next of the shuffled pool not handed out yet (NO_INDEX once it runs out)."""
        if old in self._repointed:
            return self._repointed[old]
        while self._next_fresh < len(self._shuffled):
            candidate = self._shuffled[self._next_fresh]
            self._next_fresh += 1
            if candidate != old and candidate not in self._repointed:
                self._repointed[old] = candidate
                return candidate
        return params.NO_INDEX
