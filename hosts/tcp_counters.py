"""Kernel TCP counters of this host's network namespace, for the baselines' packet statistics.

Why the kernel: the baselines use TCP, so segments, retransmissions and RTO timeouts happen
inside the kernel and are invisible to the application. ``/proc/self/net/snmp`` (``Tcp:``
OutSegs, InSegs, RetransSegs) and ``/proc/self/net/netstat`` (``TcpExt:`` TCPTimeouts,
TCPDSACKOldSent, TCPDSACKOfoSent) are per network namespace. In Mininet every host has its
own namespace, so the deltas around an all-reduce are that worker's traffic. On a shared
namespace (e.g. all ranks on 127.0.0.x loopback in one namespace) they include every other
TCP flow of the namespace, including the other ranks' -- treat them as an upper bound there.

Counters map to :class:`hosts.stats.JobStats` fields as follows: packets_sent = OutSegs
(excluding retransmitted segments, as the kernel counts them), packets_received = InSegs,
retransmissions = RetransSegs, timeouts = TCPTimeouts (RTO expirations), duplicates =
D-SACKs sent for duplicate segments received (TCPDSACKOldSent + TCPDSACKOfoSent; zero when
net.ipv4.tcp_dsack is off).
"""

from __future__ import annotations

import os
import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from hosts.stats import TIMELINE_BIN_S, JobStats

SNMP = Path("/proc/self/net/snmp")
NETSTAT = Path("/proc/self/net/netstat")


def _parse(path: Path, prefix: str) -> dict[str, int]:
    """Parse the ``Prefix: names`` / ``Prefix: values`` line pairs of a /proc/net counter file."""
    lines = [line.split() for line in path.read_text().splitlines() if line.startswith(prefix + ":")]
    if len(lines) < 2:
        raise RuntimeError(f"{path} has no '{prefix}:' counter lines")
    names, values = lines[0][1:], lines[1][1:]
    return {name: int(value) for name, value in zip(names, values)}


@dataclass(frozen=True)
class TcpCounters:
    out_segs: int
    in_segs: int
    retrans_segs: int
    timeouts: int
    dsack_sent: int

    @classmethod
    def read(cls) -> TcpCounters:
        tcp = _parse(SNMP, "Tcp")
        ext = _parse(NETSTAT, "TcpExt")
        return cls(tcp["OutSegs"], tcp["InSegs"], tcp["RetransSegs"], ext.get("TCPTimeouts", 0),
                   ext.get("TCPDSACKOldSent", 0) + ext.get("TCPDSACKOfoSent", 0))

    def __sub__(self, other: TcpCounters) -> TcpCounters:
        return TcpCounters(self.out_segs - other.out_segs, self.in_segs - other.in_segs,
                           self.retrans_segs - other.retrans_segs, self.timeouts - other.timeouts,
                           self.dsack_sent - other.dsack_sent)


def read_out_segs() -> int:
    """OutSegs alone: the cheap read the timeline samples every 10 ms."""
    return _parse(SNMP, "Tcp")["OutSegs"]


class SegmentTimeline:
    """Segments sent per 10 ms bin, sampled from OutSegs by the pump's tick callback.

    Why sampling and not per-segment timestamps: the kernel only exposes counters. One read of
    /proc/self/net/snmp is taken at the first pump iteration of each 10 ms bin (and at the
    end); the segments counted between two reads go to the bin of the earlier read. The total
    is exact; a read delayed by a long reduction shifts counts by about one bin.
    """

    def __init__(self, start_s: float) -> None:
        self._start_s = start_s
        self._last = read_out_segs()
        self._last_index = 0
        self.bins: list[int] = [0]

    def sample(self, now_s: float, final: bool = False) -> None:
        index = int((now_s - self._start_s) / TIMELINE_BIN_S)
        if index == self._last_index and not final:
            return
        current = read_out_segs()
        if index >= len(self.bins):
            self.bins.extend([0] * (index + 1 - len(self.bins)))
        self.bins[self._last_index] += current - self._last
        self._last, self._last_index = current, index


TCP_INFO_BYTES = 216
"""``struct tcp_info`` up to tcpi_bytes_retrans (Linux >= 4.19); offsets from include/uapi/linux/tcp.h."""
_BYTES_RECEIVED, _NOTSENT_BYTES, _BYTES_SENT, _BYTES_RETRANS = 128, 144, 200, 208


def process_tcp_payload() -> tuple[int, int]:
    """(bytes handed to, bytes received from) every TCP socket this process holds, since each opened.

    Why: a library that owns its sockets (Gloo inside torch) does not say how many bytes it
    moved, but its sockets are file descriptors of this process, and TCP_INFO tells, per
    socket, the payload sent once (tcpi_bytes_sent less tcpi_bytes_retrans) plus what waits in
    the write queue (tcpi_notsent_bytes) -- together what was written to it -- and the
    payload received in order (tcpi_bytes_received). Deltas around a job are its bytes as the
    other baselines count theirs (hosts/stats.py), the library's own message headers included.
    A socket opened or closed during the job counts only from or until then.
    """
    sent = received = 0
    for entry in os.scandir("/proc/self/fd"):
        try:
            if not os.readlink(entry.path).startswith("socket:"):
                continue
            sock = socket.socket(fileno=os.dup(int(entry.name)))
        except OSError:  # closed by another thread meanwhile
            continue
        with sock:
            if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
        if len(info) < TCP_INFO_BYTES:
            raise RuntimeError(f"TCP_INFO returned {len(info)} bytes, fewer than the {TCP_INFO_BYTES} of Linux >= 4.19")
        (notsent,) = struct.unpack_from("=I", info, _NOTSENT_BYTES)
        (bytes_sent, bytes_retrans) = struct.unpack_from("=QQ", info, _BYTES_SENT)
        sent += bytes_sent - bytes_retrans + notsent
        received += struct.unpack_from("=Q", info, _BYTES_RECEIVED)[0]
    return sent, received


class ProcessTcpMeter:
    """This namespace's TCP counters and this process's TCP payload bytes since it was made:
    the statistics of an all-reduce whose sockets are not ours to count (Gloo's inside DDP)."""

    def __init__(self) -> None:
        self._counters = TcpCounters.read()
        self._sent, self._received = process_tcp_payload()

    def stats(self, tat_s: float) -> JobStats:
        delta = TcpCounters.read() - self._counters
        sent, received = process_tcp_payload()
        return JobStats(tat_s=tat_s, packets_sent=delta.out_segs, packets_received=delta.in_segs,
                        retransmissions=delta.retrans_segs, timeouts=delta.timeouts, duplicates=delta.dsack_sent,
                        bytes_sent=sent - self._sent, bytes_received=received - self._received)
