"""A switch port: an AF_PACKET raw socket bound to one Linux interface.

Options chosen for a switch rather than a host: the socket is bound before it can see any
frame, ignores the frames it sends itself (PACKET_IGNORE_OUTGOING, otherwise every sent
frame would come back as input), puts the interface in promiscuous mode (frames for the
switch's virtual MAC are not addressed to the veth's own MAC), and gets a large receive
buffer so bursts from many workers queue instead of being dropped. Sends go through the
interface's qdisc on purpose: that is where the testbed shapes the link (htb), so the
switch's egress runs at the link's rate like a real port, and a full queue is a counted
send error (ENOBUFS), not an unshaped burst.

Frames are received as they were on the wire (``WireFrameReceiver``): Linux moves the
outermost 802.1Q tag of every received frame into the packet's metadata before any
packet socket sees it, so a plain ``recv`` returns tagged frames untagged. bmv2 (libpcap)
puts the tag back, and so does the receiver, from the socket's PACKET_AUXDATA.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import struct

from base.linux_sockets import (
    ETH_P_ALL,
    MSG_DONTWAIT,
    PACKET_ADD_MEMBERSHIP,
    PACKET_AUXDATA,
    PACKET_IGNORE_OUTGOING,
    PACKET_MR_PROMISC,
    PACKET_STATISTICS,
    SO_RCVBUFFORCE,
    SO_SNDBUFFORCE,
    SOL_PACKET,
    TP_STATUS_VLAN_TPID_VALID,
    TP_STATUS_VLAN_VALID,
    IoVec,
    MsgHdr,
    libc,
)

SOCKET_BUFFER_BYTES = 8 << 20
TPACKET_STATS = struct.Struct("II")
ETH_P_8021Q = 0x8100
MAC_ADDRESSES_BYTES = 12
"""Destination and source MAC: the tag goes right after them."""
VLAN_TAG = struct.Struct("!HH")
"""TPID, TCI: the 4 bytes of an 802.1Q tag."""


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


class _CmsgAuxdata(ctypes.Structure):
    """struct cmsghdr followed by struct tpacket_auxdata: the one control message we ask for."""

    _fields_ = [
        ("cmsg_len", ctypes.c_size_t),
        ("cmsg_level", ctypes.c_int),
        ("cmsg_type", ctypes.c_int),
        ("tp_status", ctypes.c_uint32),
        ("tp_len", ctypes.c_uint32),
        ("tp_snaplen", ctypes.c_uint32),
        ("tp_mac", ctypes.c_uint16),
        ("tp_net", ctypes.c_uint16),
        ("tp_vlan_tci", ctypes.c_uint16),
        ("tp_vlan_tpid", ctypes.c_uint16),
    ]


_recvmsg = libc.recvmsg
_recvmsg.restype = ctypes.c_ssize_t


class WireFrameReceiver:
    """Receives a packet socket's frames into ``buffer`` with their 802.1Q tag re-inserted.

    One recvmsg per frame through ctypes, into a message header, I/O vector and control
    buffer built once: the data path allocates nothing per frame. socket.recvmsg_into
    would also build the sender's address per frame, with an ioctl for the interface
    name: it costs about twice as much over recv_into as this does (measured on a veth).
    Moving the frame to make room for the tag costs only for tagged frames, which the
    switch then forwards as ordinary traffic.
    """

    def __init__(self, sock: socket.socket, buffer: bytearray) -> None:
        sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        self._fd = sock.fileno()
        self.buffer = buffer
        self._buffer_address = (ctypes.c_char * len(buffer)).from_buffer(buffer)
        self._iov = IoVec(ctypes.addressof(self._buffer_address), len(buffer) - VLAN_TAG.size)
        self._aux = _CmsgAuxdata()
        self._control_bytes = ctypes.sizeof(self._aux)
        self._msg = MsgHdr(None, 0, ctypes.pointer(self._iov), 1, ctypes.addressof(self._aux), self._control_bytes, 0)
        self._msg_ref = ctypes.byref(self._msg)

    def receive(self) -> int | None:
        """Length of the next frame, now at the start of ``buffer``; None if none is queued."""
        self._msg.msg_controllen = self._control_bytes  # the kernel sets it to what it wrote
        length = _recvmsg(self._fd, self._msg_ref, MSG_DONTWAIT)
        if length < 0:
            code = ctypes.get_errno()
            if code in (errno.EAGAIN, errno.EWOULDBLOCK):
                return None
            raise OSError(code, os.strerror(code))
        aux = self._aux
        if aux.tp_status & TP_STATUS_VLAN_VALID:
            return self._reinsert_tag(length, aux)
        return length

    def _reinsert_tag(self, length: int, aux: _CmsgAuxdata) -> int:
        """Put the tag the kernel took out back after the MAC addresses, as on the wire."""
        tpid = aux.tp_vlan_tpid if aux.tp_status & TP_STATUS_VLAN_TPID_VALID else ETH_P_8021Q
        frame = self.buffer
        frame[MAC_ADDRESSES_BYTES + VLAN_TAG.size : length + VLAN_TAG.size] = frame[MAC_ADDRESSES_BYTES:length]
        VLAN_TAG.pack_into(frame, MAC_ADDRESSES_BYTES, tpid, aux.tp_vlan_tci)
        return length + VLAN_TAG.size
