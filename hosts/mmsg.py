"""Batches of UDP datagrams in one system call each: Linux's sendmmsg and recvmmsg.

An in-network worker (SwitchML's, ATP's) and ATP's parameter server exchange small
fixed-size datagrams with the switch, tens of thousands per second. One ``send``/``recv_into`` per datagram costs a system call and a round of
CPython argument handling each; under load that, not the protocol, was most of a worker's
~50 us per packet. Python's socket module has no sendmmsg/recvmmsg, so this module calls
libc's through ctypes, over arrays that are set up once: ``tx`` and ``rx`` are numpy record
arrays (one record per datagram), and the ``mmsghdr``/``iovec`` tables that point into
them never change. A batch is then: fill ``tx[:n]`` with array operations, ``send(n)``; or
``receive()``, then read ``rx[:n]`` and ``lengths[:n]``.

The socket must be non-blocking; sending needs it connected (no addresses in the headers),
receiving does not (ATP's parameter server hears every worker of its job on one unconnected
socket). Waiting is the caller's business (poll).
"""

from __future__ import annotations

import ctypes
import errno
from collections import Counter
import os
import socket

import numpy as np

from base.linux_sockets import IP_MTU_DISCOVER, IP_PMTUDISC_PROBE, MSG_DONTWAIT, SO_RCVBUFFORCE, SO_SNDBUFFORCE, IoVec, MsgHdr, libc

SO_NO_CHECK = 11
"""Linux SOL_SOCKET option: send UDP datagrams with checksum 0 (not exported by Python)."""
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
"""Room for a window of datagrams (and their duplicates) while the process is busy."""
RECEIVE_SLACK_BYTES = 64
"""Room past a record in each receive buffer, so a datagram longer than the expected one
shows up as a longer length instead of being truncated to a plausible size."""


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", MsgHdr), ("msg_len", ctypes.c_uint)]


_sendmmsg = libc.sendmmsg
_sendmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int]
_sendmmsg.restype = ctypes.c_int
_recvmmsg = libc.recvmmsg
_recvmmsg.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_void_p]
_recvmmsg.restype = ctypes.c_int

ICMP_ERRNOS = (errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENOPROTOOPT, errno.EMSGSIZE,
               errno.EOPNOTSUPP, errno.EHOSTDOWN, errno.ENONET, errno.EPROTO)
"""Every errno Linux derives from an ICMP error that quotes a UDP socket's flow
(net/ipv4/icmp.c's icmp_err_convert and udp.c's __udp4_lib_err): destination unreachable
codes 0-15 (ENETUNREACH, EHOSTUNREACH, ENOPROTOOPT, ECONNREFUSED, EMSGSIZE for "fragmentation
needed", EOPNOTSUPP for "source route failed", EHOSTDOWN, ENONET), time exceeded
(EHOSTUNREACH) and parameter problem (EPROTO). A connected socket takes the hard ones as its
pending error without IP_RECVERR, every one with it; the next send or receive returns it,
whichever datagram it is about. UDP has no sequence number, so anyone who reaches the host
can forge one: each is one lost datagram, never the end of a job."""
REPORTED_ERRNOS = (*ICMP_ERRNOS, errno.ENETDOWN)
"""Errors the kernel reports on a send or a receive for a datagram that is lost: an ICMP
error for an earlier one (ICMP_ERRNOS), or no route while the host's link is down
(``ip link set h3-eth0 down``: ENETUNREACH or ENETDOWN on every send until it is up again)."""
SEND_LOST_ERRNOS = (errno.EAGAIN, errno.ENOBUFS, *REPORTED_ERRNOS)
"""A datagram the kernel refuses with these (twice, for REPORTED_ERRNOS: ``send``) is lost
like one dropped on the wire: the sender's retransmission timer recovers it, once the link
carries it again; a link that stays down, or a datagram that never fits the path (EMSGSIZE
on every send), fails the job at its deadline, where the refusals are counted and named
(``refusals``)."""


def errno_counts(refusals: Counter[int]) -> dict[str, int]:
    """``refusals`` by errno name (``{"ECONNREFUSED": 3}``): how JobStats.socket_errors
    and the results name them."""
    return {errno.errorcode.get(code, str(code)): n for code, n in sorted(refusals.items()) if n}


def _message_table(buffers: np.ndarray, stride: int, length: int) -> tuple[ctypes.Array, ctypes.Array]:
    """An mmsghdr per row of ``buffers``, each with one iovec of ``length`` bytes at its row."""
    count = len(buffers)
    iovecs = (IoVec * count)()
    messages = (_MMsgHdr * count)()
    base = buffers.ctypes.data
    for i in range(count):
        iovecs[i].iov_base = base + i * stride
        iovecs[i].iov_len = length
        messages[i].msg_hdr.msg_iov = ctypes.pointer(iovecs[i])
        messages[i].msg_hdr.msg_iovlen = 1
    return iovecs, messages


class BatchSocket:
    """sendmmsg/recvmmsg over preallocated record arrays for one datagram socket (connected, to send).

    ``tx`` holds up to ``capacity`` outgoing records of ``dtype``; ``rx`` is a view of
    ``capacity`` receive buffers as records of ``dtype`` (each buffer has
    RECEIVE_SLACK_BYTES more, see there), and ``lengths[i]`` is the size of the datagram
    received into ``rx[i]``.
    """

    def __init__(self, sock: socket.socket, dtype: np.dtype, capacity: int) -> None:
        if sock.gettimeout() != 0.0:
            raise ValueError("BatchSocket needs a non-blocking socket")
        self._sock = sock
        self.capacity = capacity
        self.tx = np.zeros(capacity, dtype=dtype)
        self._tx_table = _message_table(self.tx, dtype.itemsize, dtype.itemsize)
        stride = dtype.itemsize + RECEIVE_SLACK_BYTES
        self._rx_bytes = np.zeros((capacity, stride), dtype=np.uint8)
        self.rx = np.ndarray((capacity,), dtype=dtype, buffer=self._rx_bytes, strides=(stride,))
        self._rx_table = _message_table(self._rx_bytes, stride, stride)
        offset = _MMsgHdr.msg_len.offset
        table_bytes = np.frombuffer(self._rx_table[1], dtype=np.uint8)
        self.lengths = np.ndarray((capacity,), dtype=np.uint32, buffer=table_bytes, offset=offset,
                                  strides=(ctypes.sizeof(_MMsgHdr),))
        self._tx_address = ctypes.addressof(self._tx_table[1])
        self._rx_address = ctypes.addressof(self._rx_table[1])
        self._message_size = ctypes.sizeof(_MMsgHdr)
        self.refusals: Counter[int] = Counter()
        """errno -> datagrams the kernel refused to send, or reported lost, with it: the
        evidence a job that times out gives for why (a link that is down: ENETUNREACH)."""

    def send(self, count: int) -> int:
        """Send ``tx[:count]`` in as few calls as the kernel allows; returns how many it
        refused (SEND_LOST_ERRNOS: lost, as if dropped on the wire). Other errors raise.

        An error of REPORTED_ERRNOS may concern an earlier datagram (an ICMP error the socket
        held): the datagram in hand was not sent, and the error is consumed, so that datagram
        is tried once more before it counts as lost. ``refusals`` counts each refused
        datagram once, with the errno of its first refusal."""
        fd, sent, refused, retrying = self._sock.fileno(), 0, 0, False
        while sent + refused < count:
            done = _sendmmsg(fd, self._tx_address + (sent + refused) * self._message_size, count - sent - refused, 0)
            if done >= 0:
                sent += done
                retrying = False
                continue
            code = ctypes.get_errno()
            if code == errno.EINTR:
                continue
            if code not in SEND_LOST_ERRNOS:
                raise OSError(code, f"sendmmsg: {os.strerror(code)}")
            if not retrying:
                self.refusals[code] += 1
                if code in REPORTED_ERRNOS:
                    retrying = True
                    continue
            retrying = False
            refused += 1
        return refused

    def receive(self) -> int:
        """Receive what is waiting, up to ``capacity`` datagrams, without blocking; 0 if none.

        An ICMP error reported for an earlier send (ECONNREFUSED) is consumed and the
        receive retried: the datagram it concerns is lost, and its timer resends it.
        """
        fd = self._sock.fileno()
        while True:
            count = _recvmmsg(fd, self._rx_address, self.capacity, MSG_DONTWAIT, None)
            if count >= 0:
                return count
            code = ctypes.get_errno()
            if code in (errno.EAGAIN, errno.EWOULDBLOCK):
                return 0
            if code == errno.EINTR:
                continue
            if code not in REPORTED_ERRNOS:
                raise OSError(code, f"recvmmsg: {os.strerror(code)}")
            self.refusals[code] += 1


def datagram_socket(bind: tuple[str, int], peer: tuple[str, int] | None = None,
                    buffer_bytes: int = SOCKET_BUFFER_BYTES) -> socket.socket:
    """A non-blocking UDP socket for a BatchSocket: checksum 0 (as the switches send), buffers
    of ``buffer_bytes`` (beyond net.core.[rw]mem_max when root), the interface's MTU whatever
    a forged ICMP claims (ICMP_ERRNOS), bound to ``bind`` and connected to ``peer`` if given
    (the kernel then drops every datagram from anyone else)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
        sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_PROBE)
        for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, buffer_bytes)
            except PermissionError:
                sock.setsockopt(socket.SOL_SOCKET, plain, buffer_bytes)
        sock.bind(bind)
        if peer is not None:
            sock.connect(peer)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock
