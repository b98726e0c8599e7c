"""Linux's packet-socket constants, struct iovec and struct msghdr for ctypes, and libc to call
recvmsg and friends.

Python's socket module has no sendmmsg/recvmmsg and no recvmsg into a caller's buffer with
its own control buffer; the embedded switch's ports (re-inserting 802.1Q tags from
PACKET_AUXDATA) and the in-network workers' batches (hosts/mmsg.py) call libc for
them, with these layouts.
"""

from __future__ import annotations

import ctypes

# <linux/if_packet.h>, <linux/if_ether.h>, <asm/socket.h>, <bits/socket.h>: what Python's
# socket module does not name.
SOL_PACKET = 263
ETH_P_ALL = 0x0003
PACKET_ADD_MEMBERSHIP = 1
PACKET_MR_PROMISC = 1
PACKET_STATISTICS = 6
PACKET_AUXDATA = 8
PACKET_IGNORE_OUTGOING = 23
TP_STATUS_VLAN_VALID = 0x10
TP_STATUS_VLAN_TPID_VALID = 0x40
SO_SNDBUFFORCE = 32
SO_RCVBUFFORCE = 33
MSG_DONTWAIT = 0x40
IP_MTU_DISCOVER = 10
IP_PMTUDISC_PROBE = 3
"""Set DF, but send at the interface's MTU whatever path MTU an ICMP "fragmentation needed"
claimed (<linux/in.h>; how a SwitchML worker's socket uses it: hosts/switchml/README.md)."""


class IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class MsgHdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),
        ("msg_iov", ctypes.POINTER(IoVec)),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


libc = ctypes.PyDLL(None, use_errno=True)
"""PyDLL keeps the GIL across the call: every caller here passes non-blocking sockets or
MSG_DONTWAIT, so no call blocks, and skipping the GIL release and re-acquire is a
measurable part of a call this short."""
