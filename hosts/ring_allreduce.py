"""Ring all-reduce over TCP: the NCCL/Gloo-style baseline that SwitchML is compared with.

Algorithm (n ranks, rank r, tensor split into n segments): 2(n-1) steps; at step s rank r
sends segment (r - s) mod n to rank r+1 and receives segment (r - s - 1) mod n from rank
r-1. During the first n-1 steps (reduce-scatter) the received segment is added into the
local one; during the last n-1 (all-gather) it overwrites it. After the reduce-scatter rank
r holds the full sum of segment r+1, which the all-gather then circulates, so every rank
ends with bit-identical results (each segment's sum is computed once, by one rank).

Pipelining: each segment is cut into chunks (``pipeline_chunk_elements``: at least
PIPELINE_CHUNKS of them, none larger than ``chunk_bytes``). The chunk received at step s is
exactly the chunk sent at step s+1, so it is forwarded as soon as it has been reduced --
chunk i of step s+1 leaves while chunk i+1 of step s is still arriving, as in NCCL. A
segment sent as one chunk would not pipeline at all: its successor waits for the whole of
it before forwarding, and a stalled window idles the uplink after it (a 262,144-element
tensor over 8 ranks is one 128 KiB chunk per segment: the ring reached 60 % of its bound).
All of this runs in one thread over non-blocking sockets (:class:`hosts.tcp_mesh.Pump`).

Why sending from and receiving into the same output buffer is safe: a region is only
overwritten by data that went all the way around the ring after this rank had sent it, so
its send had finished (been copied into the kernel) long before.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence

import numpy as np

from hosts.collective import TcpCollective, chunk_bounds, chunk_elements, split_bounds
from hosts.tcp_mesh import JOB_HEADER_BYTES, Peer, Pump, accept, check_job_header, connect, describe, job_header, listen

log = logging.getLogger(__name__)

PIPELINE_CHUNKS = 8
"""How many chunks a segment is cut into at least, so that a step forwards while it receives."""
MIN_CHUNK_BYTES = 4096
"""No chunk smaller (a few full TCP segments): below it the per-chunk Python work would show."""


def pipeline_chunk_elements(segment_elements: int, dtype: np.dtype, chunk_bytes: int) -> int:
    """Elements per pipeline chunk of a segment: a PIPELINE_CHUNKS-th of it, at most
    ``chunk_bytes`` and at least MIN_CHUNK_BYTES (or ``chunk_bytes`` where that is smaller)."""
    largest = chunk_elements(chunk_bytes, dtype)
    smallest = min(largest, chunk_elements(MIN_CHUNK_BYTES, dtype))
    return max(smallest, min(largest, -(-segment_elements // PIPELINE_CHUNKS)))


class RingAllReduce(TcpCollective):
    """One rank of a ring; :meth:`connect` once, then :meth:`allreduce` as often as needed."""

    name = "ring"

    def __init__(self, peers: Sequence[Peer], rank: int, chunk_bytes: int = 128 * 1024,
                 timeout_s: float = 10.0, connect_timeout_s: float = 30.0) -> None:
        super().__init__(peers, rank, chunk_bytes, timeout_s, connect_timeout_s)
        self._next_rank = (rank + 1) % self.world
        self._prev_rank = (rank - 1) % self.world
        self._listener: socket.socket | None = None
        self._to_next: socket.socket | None = None
        self._from_prev: socket.socket | None = None

    def connect(self) -> None:
        """Listen on our own address, connect to the next rank, accept the previous one (untimed set-up)."""
        if self.world == 1:
            return
        self._listener = listen(self.peers[self.rank], backlog=8)
        self._to_next = connect(self.rank, self.world, self._next_rank, self.peers[self._next_rank],
                                self.connect_timeout_s)
        prev = {self._prev_rank: self.peers[self._prev_rank]}
        self._from_prev = accept(self._listener, self.rank, self.world, prev, self.connect_timeout_s)[self._prev_rank]
        log.info("ring rank %d/%d connected: next %s, previous %s", self.rank, self.world,
                 describe(self._next_rank, self.peers[self._next_rank]),
                 describe(self._prev_rank, self.peers[self._prev_rank]))

    def _connected(self) -> bool:
        return self._to_next is not None and self._from_prev is not None

    def _queue_transfers(self, pump: Pump, out: np.ndarray, seq: int) -> None:
        n, r = self.world, self.rank
        bounds = split_bounds(out.size, n)
        chunk = pipeline_chunk_elements(max(b - a for a, b in bounds), out.dtype, self.chunk_bytes)
        segments = [chunk_bounds(a, b, chunk) for a, b in bounds]
        steps = 2 * (n - 1)
        scratch = np.empty(chunk, dtype=out.dtype)
        to_next, from_prev = self._to_next, self._from_prev
        prev_name = describe(self._prev_rank, self.peers[self._prev_rank])
        pump.add(to_next, describe(self._next_rank, self.peers[self._next_rank]))
        pump.add(from_prev, prev_name)

        header_in = bytearray(JOB_HEADER_BYTES)
        pump.send(to_next, memoryview(job_header(seq, out.size, out.dtype.name)))
        pump.recv(from_prev, memoryview(header_in),
                  lambda: check_job_header(bytes(header_in), seq, out.size, out.dtype.name, prev_name))
        for a, b in segments[r]:
            pump.send(to_next, memoryview(out[a:b]))

        def received(step: int, a: int, b: int) -> None:
            if step < n - 1:
                np.add(out[a:b], scratch[:b - a], out=out[a:b])
            if step + 1 < steps:
                pump.send(to_next, memoryview(out[a:b]))

        for step in range(steps):
            for a, b in segments[(r - step - 1) % n]:
                target = scratch[:b - a] if step < n - 1 else out[a:b]
                pump.recv(from_prev, memoryview(target), lambda s=step, a=a, b=b: received(s, a, b))

    def close(self) -> None:
        for sock in (self._to_next, self._from_prev, self._listener):
            if sock is not None:
                sock.close()
        self._to_next = self._from_prev = self._listener = None
