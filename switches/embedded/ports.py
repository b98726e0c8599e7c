"""A switch port: an AF_PACKET raw socket bound to one Linux interface.

Options chosen for a switch rather than a host: the socket is bound before it can see any
frame, ignores the frames it sends itself (PACKET_IGNORE_OUTGOING, otherwise every sent
frame would come back as input), puts the interface in promiscuous mode (frames for the
switch's virtual MAC are not addressed to the veth's own MAC), and gets a large receive
buffer so bursts from many workers queue instead of being dropped. Sends go through the
interface's qdisc on purpose: that is where the testbed shapes the link (htb), so the
switch's egress runs at the link's rate like a real port, and a full queue is a counted
send error (ENOBUFS), not an unshaped burst.
"""

from __future__ import annotations

import socket
import struct

SOL_PACKET = 263
ETH_P_ALL = 0x0003
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_STATISTICS = 6
PACKET_IGNORE_OUTGOING = 23
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
SOCKET_BUFFER_BYTES = 8 << 20
TPACKET_STATS = struct.Struct("II")


def open_port_socket(ifname: str, promiscuous: bool = True, buffer_bytes: int = SOCKET_BUFFER_BYTES) -> socket.socket:
    """A non-blocking raw socket that receives and sends whole Ethernet frames on ``ifname``."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
        for force, plain in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, buffer_bytes)
            except PermissionError:
                sock.setsockopt(socket.SOL_SOCKET, plain, buffer_bytes)
        sock.bind((ifname, ETH_P_ALL))
        if promiscuous:
            membership = struct.pack("iHH8s", socket.if_nametoindex(ifname), PACKET_MR_PROMISC, 0, b"")
            sock.setsockopt(SOL_PACKET, PACKET_ADD_MEMBERSHIP, membership)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def receive_drops(sock: socket.socket) -> int:
    """Frames the kernel dropped because the socket's queue was full, since the last call."""
    _packets, drops = TPACKET_STATS.unpack(sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, TPACKET_STATS.size))
    return drops
