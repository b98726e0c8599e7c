"""Sharded parameter server over TCP (BytePS co-located mode): the second baseline.

Every rank is a worker and also the server of shard r (the tensor split into n shards).
Push: worker w sends shard j of its tensor to server j. Each server adds the n-1 incoming
shards into its own copy of shard r; as soon as chunk c of the shard has every
contribution it is sent back (pull) to every worker. Each byte crosses each host's link
twice in each direction, like the ring, but in one round trip instead of 2(n-1) steps.

Connections: rank w opens one "client" connection to every other rank j (carrying w's push
of shard j, and j's result for shard j back) and accepts one "server" connection from each
(carrying their pushes of shard r, and the results of shard r back). Two connections per
pair keep each direction one ordered stream, so no per-chunk framing is needed.
Results leave in chunk order because every pusher sends its chunks in order.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Sequence

import numpy as np

from hosts.collective import TcpCollective, chunk_bounds, chunk_elements, split_bounds
from hosts.tcp_mesh import JOB_HEADER_BYTES, Peer, Pump, accept, check_job_header, connect, describe, job_header, listen

log = logging.getLogger(__name__)


class ParameterServerAllReduce(TcpCollective):
    """One rank (worker + shard server); :meth:`connect` once, then :meth:`allreduce` repeatedly."""

    name = "parameter server"

    def __init__(self, peers: Sequence[Peer], rank: int, chunk_bytes: int = 128 * 1024,
                 timeout_s: float = 10.0, connect_timeout_s: float = 30.0) -> None:
        super().__init__(peers, rank, chunk_bytes, timeout_s, connect_timeout_s)
        self._listener: socket.socket | None = None
        self._clients: dict[int, socket.socket] = {}  # we push to / pull from rank j's server
        self._servers: dict[int, socket.socket] = {}  # rank j pushes to / pulls from our server

    def _others(self) -> list[int]:
        return [j for j in range(self.world) if j != self.rank]

    def connect(self) -> None:
        """Listen, connect to every other rank's server, accept every other rank's client (untimed)."""
        if self.world == 1:
            return
        self._listener = listen(self.peers[self.rank], backlog=self.world + 8)
        for j in self._others():
            self._clients[j] = connect(self.rank, self.world, j, self.peers[j], self.connect_timeout_s)
        expected = {j: self.peers[j] for j in self._others()}
        self._servers = accept(self._listener, self.rank, self.world, expected, self.connect_timeout_s)
        log.info("parameter server rank %d/%d connected to %d peers", self.rank, self.world, self.world - 1)

    def _connected(self) -> bool:
        return len(self._clients) == self.world - 1

    def _queue_transfers(self, pump: Pump, out: np.ndarray, seq: int) -> None:
        elems = chunk_elements(self.chunk_bytes, out.dtype)
        shards = [chunk_bounds(a, b, elems) for a, b in split_bounds(out.size, self.world)]
        own = shards[self.rank]
        header = job_header(seq, out.size, out.dtype.name)
        names = {j: describe(j, self.peers[j]) for j in self._others()}
        for j in self._others():
            pump.add(self._clients[j], f"server {names[j]}")
            pump.add(self._servers[j], f"client {names[j]}")

        def expect_header(sock: socket.socket, who: str) -> None:
            buf = bytearray(JOB_HEADER_BYTES)
            pump.recv(sock, memoryview(buf),
                      lambda: check_job_header(bytes(buf), seq, out.size, out.dtype.name, who))

        # Worker side: push shard j to server j, expect the summed shard j back in place.
        for j in self._others():
            client = self._clients[j]
            pump.send(client, memoryview(header))
            for a, b in shards[j]:
                pump.send(client, memoryview(out[a:b]))
            expect_header(client, f"server {names[j]}")
            for a, b in shards[j]:
                pump.recv(client, memoryview(out[a:b]))

        # Server side: add every pushed chunk of our shard; a chunk complete from all peers is pulled.
        contributions = [0] * len(own)

        def pushed(c: int, scratch: np.ndarray) -> None:
            a, b = own[c]
            np.add(out[a:b], scratch[:b - a], out=out[a:b])
            contributions[c] += 1
            if contributions[c] == self.world - 1:
                for sock in self._servers.values():
                    pump.send(sock, memoryview(out[a:b]))

        for j in self._others():
            server = self._servers[j]
            scratch = np.empty(elems, dtype=out.dtype)  # one per pusher: its chunks arrive in order
            expect_header(server, f"client {names[j]}")
            pump.send(server, memoryview(header))
            for c, (a, b) in enumerate(own):
                pump.recv(server, memoryview(scratch[:b - a]), lambda c=c, s=scratch: pushed(c, s))

    def close(self) -> None:
        for sock in [*self._clients.values(), *self._servers.values()]:
            sock.close()
        if self._listener is not None:
            self._listener.close()
        self._clients, self._servers, self._listener = {}, {}, None
