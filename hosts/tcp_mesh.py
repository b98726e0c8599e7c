"""TCP plumbing shared by the baselines (ring all-reduce, parameter server).

Why one module: both baselines need the same things -- a listener on the host's own
address, outgoing connections that tolerate peers that are not listening yet, a hello
that tells the acceptor which rank is calling, and a non-blocking pump that moves many
buffers over many sockets at once without deadlocking (every rank sends and receives
concurrently, so blocking sends would stall once the kernel buffers fill).

Every wait is bounded: connecting retries until a deadline, accepting raises
:class:`PeerError` naming the peer(s) it was waiting for once ``timeout_s`` passes, and the
pump raises :class:`PeerTimeout` when its transfers are not done by their deadline.
Nothing here hangs on a dead peer.
"""

from __future__ import annotations

import logging
import selectors
import socket
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

log = logging.getLogger(__name__)

Peer = tuple[str, int]
"""(IPv4 address, TCP port) of a rank's listener."""

SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
"""SO_SNDBUF/SO_RCVBUF request; the kernel caps it at net.core.{w,r}mem_max."""
RECEIVE_WAKE_BYTES = 32 * 1024
"""A receiving rank is woken when this much of its current buffer has arrived (SO_RCVLOWAT),
or all of it when less remains, not for every segment: on a 20 Mbit/s link a segment
arrives every 0.6 ms, and a wake-up per segment cost each rank of the 8-worker job a
tenth of a core. The same batching as the SwitchML worker's (hosts/switchml/job.py), so
the comparison is between protocols, not between hot paths. 32 KiB is under a quarter
of the smallest receive buffer Linux grants by default (net.core.rmem_max), so the sender's
window never waits for the receiver to wake."""

_HELLO = struct.Struct("!4sII")  # magic, sender rank, world size
_HELLO_MAGIC = b"SMLB"
_JOB = struct.Struct("!4sQQ8s")  # magic, all-reduce sequence number, element count, dtype name
_JOB_MAGIC = b"SMLJ"
JOB_HEADER_BYTES = _JOB.size


class PeerError(RuntimeError):
    """A peer did not answer in time, closed its connection, or broke the protocol."""


class PeerTimeout(PeerError, TimeoutError):
    """The transfers were not finished by their deadline (names the peers still pending)."""


def describe(rank: int, peer: Peer) -> str:
    """Human-readable peer name used in every error message."""
    return f"rank {rank} at {peer[0]}:{peer[1]}"


def tune(sock: socket.socket) -> None:
    """Disable Nagle (chunks must leave at once to keep the pipeline full) and enlarge buffers."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)


def listen(addr: Peer, backlog: int) -> socket.socket:
    """Bind and listen on this rank's own address (before anyone connects, so peers can queue)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Buffer sizes must be set on the listener to be inherited and to affect the window scale.
    tune(sock)
    sock.bind(addr)
    sock.listen(backlog)
    return sock


def _recv_exact(sock: socket.socket, size: int, who: str) -> bytes:
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        try:
            n = sock.recv_into(view[got:])
        except TimeoutError as exc:
            raise PeerError(f"timed out waiting for {who}") from exc
        if n == 0:
            raise PeerError(f"{who} closed the connection during set-up")
        got += n
    return bytes(buf)


def connect(rank: int, world: int, target_rank: int, target: Peer, timeout_s: float,
            retry_interval_s: float = 0.05) -> socket.socket:
    """Connect to ``target``, retrying while it is not listening yet, then say who we are.

    Retries are needed because ranks start in any order; the deadline turns a peer that never
    comes up into a clear error instead of an endless loop.
    """
    who = describe(target_rank, target)
    deadline = time.monotonic() + timeout_s
    attempts = 0
    while True:
        attempts += 1
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tune(sock)
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            sock.connect(target)
            break
        except OSError as exc:
            sock.close()
            if time.monotonic() + retry_interval_s >= deadline:
                raise PeerError(f"rank {rank} could not connect to {who} within {timeout_s:.1f} s "
                                f"({attempts} attempts, last error: {exc})") from exc
            time.sleep(retry_interval_s)
    sock.sendall(_HELLO.pack(_HELLO_MAGIC, rank, world))
    log.debug("rank %d connected to %s after %d attempt(s)", rank, who, attempts)
    return sock


def accept(listener: socket.socket, rank: int, world: int, expected: dict[int, Peer],
           timeout_s: float) -> dict[int, socket.socket]:
    """Accept one connection from each rank in ``expected``; the hello says which rank it is."""
    deadline = time.monotonic() + timeout_s
    accepted: dict[int, socket.socket] = {}
    while len(accepted) < len(expected):
        listener.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            sock, addr = listener.accept()
        except TimeoutError as exc:
            missing = ", ".join(describe(r, p) for r, p in expected.items() if r not in accepted)
            raise PeerError(f"rank {rank}: no connection within {timeout_s:.1f} s from {missing}") from exc
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        magic, peer_rank, peer_world = _HELLO.unpack(_recv_exact(sock, _HELLO.size, f"peer at {addr}"))
        if magic != _HELLO_MAGIC or peer_world != world or peer_rank not in expected or peer_rank in accepted:
            sock.close()
            raise PeerError(f"rank {rank}: unexpected hello from {addr}: magic={magic!r} "
                            f"rank={peer_rank} world={peer_world} (expected one of {sorted(expected)}, world {world})")
        tune(sock)
        accepted[peer_rank] = sock
    return accepted


def job_header(seq: int, count: int, dtype: str) -> bytes:
    """Prefix of every all-reduce stream: lets the receiver catch ranks calling with different tensors."""
    return _JOB.pack(_JOB_MAGIC, seq, count, dtype.encode()[:8])


def check_job_header(data: bytes, seq: int, count: int, dtype: str, who: str) -> None:
    """Raise :class:`PeerError` if ``who`` started a different all-reduce than ours."""
    magic, peer_seq, peer_count, peer_dtype = _JOB.unpack(data)
    peer_dtype_name = peer_dtype.rstrip(b"\0").decode(errors="replace")
    if magic != _JOB_MAGIC or (peer_seq, peer_count, peer_dtype_name) != (seq, count, dtype[:8]):
        raise PeerError(f"{who} started a different all-reduce: #{peer_seq} of {peer_count} {peer_dtype_name} "
                        f"(magic {magic!r}); this rank runs #{seq} of {count} {dtype}")


@dataclass
class _Op:
    view: memoryview
    done: Callable[[], None] | None
    offset: int = 0


@dataclass
class _Channel:
    sock: socket.socket
    name: str
    sends: deque[_Op] = field(default_factory=deque)
    recvs: deque[_Op] = field(default_factory=deque)
    registered: int = 0
    wake_bytes: int = 1
    """The socket's SO_RCVLOWAT (Linux's default is 1)."""


class Pump:
    """Moves queued buffers over several non-blocking sockets until every queue is empty.

    Receives are queued up front with a completion callback; callbacks reduce the received
    chunk and queue the next sends, which is what pipelines the algorithms: chunk i goes out
    while chunk i+1 is still arriving. One thread, one selector -- no locks.

    ``timeout_s`` bounds the whole of :meth:`run`, counted from ``since`` (a
    ``time.monotonic()`` value; default: now) -- a total deadline, not an idle timeout, so a
    peer that trickles bytes cannot stretch a job beyond it. When it passes, the error names
    every peer we were still waiting on.
    """

    def __init__(self, timeout_s: float, tick_s: float = 0.01, since: float | None = None) -> None:
        self._timeout_s = timeout_s
        self._deadline = (time.monotonic() if since is None else since) + timeout_s
        self._on_tick: Callable[[float], None] | None = None
        self._tick_s = tick_s
        self._selector = selectors.DefaultSelector()
        self._channels: dict[int, _Channel] = {}
        self.bytes_sent = 0
        self.bytes_received = 0

    def set_tick(self, on_tick: Callable[[float], None]) -> None:
        """Call ``on_tick(time.monotonic())`` at least every ``tick_s`` while running (timeline sampling)."""
        self._on_tick = on_tick

    def add(self, sock: socket.socket, name: str) -> None:
        """Register a connected socket; ``name`` is what errors call the peer."""
        sock.setblocking(False)
        self._channels[sock.fileno()] = _Channel(sock, name)

    def send(self, sock: socket.socket, view: memoryview, done: Callable[[], None] | None = None) -> None:
        """Queue ``view`` (bytes, must stay unchanged until sent) for sending after earlier sends."""
        if view.nbytes:
            self._channels[sock.fileno()].sends.append(_Op(view.cast("B"), done))
        elif done is not None:
            done()

    def recv(self, sock: socket.socket, view: memoryview, done: Callable[[], None] | None = None) -> None:
        """Queue a receive that fills ``view`` exactly, then calls ``done``."""
        if view.nbytes:
            self._channels[sock.fileno()].recvs.append(_Op(view.cast("B"), done))
        elif done is not None:
            done()

    def _pending(self) -> list[_Channel]:
        return [ch for ch in self._channels.values() if ch.sends or ch.recvs]

    def _update_registration(self, ch: _Channel) -> None:
        if ch.recvs:
            head = ch.recvs[0]
            wake_bytes = min(head.view.nbytes - head.offset, RECEIVE_WAKE_BYTES)
            if wake_bytes != ch.wake_bytes:  # never more than the buffer still expects: no deadlock
                ch.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, wake_bytes)
                ch.wake_bytes = wake_bytes
        want = (selectors.EVENT_WRITE if ch.sends else 0) | (selectors.EVENT_READ if ch.recvs else 0)
        if want == ch.registered:
            return
        if ch.registered and want:
            self._selector.modify(ch.sock, want, ch)
        elif want:
            self._selector.register(ch.sock, want, ch)
        else:
            self._selector.unregister(ch.sock)
        ch.registered = want

    def _do_send(self, ch: _Channel) -> None:
        self.bytes_sent = self._advance(ch, ch.sends, ch.sock.send, "sending to", self.bytes_sent)

    def _do_recv(self, ch: _Channel) -> None:
        self.bytes_received = self._advance(ch, ch.recvs, ch.sock.recv_into, "receiving from", self.bytes_received)

    @staticmethod
    def _advance(ch: _Channel, ops: deque[_Op], io: Callable[[memoryview], int], what: str, total: int) -> int:
        """Move bytes for the queued ops of one direction until the socket would block.

        Returns the direction's new byte total. Moving 0 bytes into a non-empty buffer is
        the peer closing the connection, an error naming it.
        """
        while ops:
            op = ops[0]
            try:
                n = io(op.view[op.offset:])
            except BlockingIOError:
                return total
            except OSError as exc:
                raise PeerError(f"{what} {ch.name} failed: {exc}") from exc
            if n == 0 and op.offset < op.view.nbytes:
                raise PeerError(f"{ch.name} closed the connection with {op.view.nbytes - op.offset} bytes "
                                f"of the current buffer and {len(ops) - 1} more buffers outstanding")
            op.offset += n
            total += n
            if op.offset < op.view.nbytes:
                return total
            ops.popleft()
            if op.done is not None:
                op.done()
        return total

    def run(self) -> None:
        """Drive all queues to completion, or raise :class:`PeerTimeout` at the deadline."""
        try:
            while True:
                pending = self._pending()
                for ch in self._channels.values():
                    self._update_registration(ch)
                if not pending:
                    return
                left = self._deadline - time.monotonic()
                if left <= 0:
                    waiting = "; ".join(f"{ch.name} ({len(ch.sends)} sends, {len(ch.recvs)} receives pending)"
                                        for ch in pending)
                    raise PeerTimeout(f"not finished within {self._timeout_s:g} s, still waiting on: {waiting}")
                wait = min(left, self._tick_s) if self._on_tick else left
                for key, events in self._selector.select(wait):
                    ch: _Channel = key.data
                    if events & selectors.EVENT_READ:
                        self._do_recv(ch)
                    if events & selectors.EVENT_WRITE:
                        self._do_send(ch)
                if self._on_tick:
                    self._on_tick(time.monotonic())
        finally:
            for ch in self._channels.values():
                if ch.registered:
                    self._selector.unregister(ch.sock)
                    ch.registered = 0

    def close(self) -> None:
        """Release the selector (the sockets belong to the caller)."""
        self._selector.close()
