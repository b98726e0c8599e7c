"""The frame every in-network aggregation protocol's packets travel in, defined once.

Ethernet, IPv4 (no options) and UDP (checksum 0) at fixed offsets, the int32 elements a
packet carries, and the helpers that build and check those headers. Each protocol's own
header follows the UDP header (``protocol/<p>/packet.py``: SwitchML's switchml_h, ATP's
atp_h)::

    Ethernet 14 | IPv4 20 | UDP 8 (checksum 0) | the protocol's header | k x int32 (big-endian)

The hot path (workers, the embedded switch) uses these ``struct``/numpy definitions
directly, with no per-packet objects.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

ETH_HEADER_BYTES = 14
IPV4_HEADER_BYTES = 20
UDP_HEADER_BYTES = 8
ETHERTYPE_IPV4 = 0x0800
IPPROTO_UDP = 17

ETH_OFFSET = 0
IPV4_OFFSET = ETH_OFFSET + ETH_HEADER_BYTES
UDP_OFFSET = IPV4_OFFSET + IPV4_HEADER_BYTES
PAYLOAD_OFFSET = UDP_OFFSET + UDP_HEADER_BYTES
"""Where a protocol's header starts: right after the UDP header."""

ELEMENT_DTYPE = np.dtype(">i4")
"""Elements travel as big-endian two's complement int32."""
ELEMENT_BYTES = ELEMENT_DTYPE.itemsize

IPV4_MTU = 1500
"""The hosts' and switches' interface MTU (Linux's default for veths)."""

EXPONENT_MIN = -128
EXPONENT_MAX = 127
"""Range of an int8 exponent field (the quantizer's block exponent, protocol/quantize.py)."""


def max_elements(header_bytes: int) -> int:
    """The most elements one packet can carry after a protocol header of ``header_bytes``
    without exceeding the MTU."""
    return (IPV4_MTU - IPV4_HEADER_BYTES - UDP_HEADER_BYTES - header_bytes) // ELEMENT_BYTES


def decode_elements(buffer: bytes | bytearray | memoryview, offset: int, k: int) -> np.ndarray:
    """The k big-endian elements at ``offset`` as a read-only view (no copy)."""
    return np.frombuffer(buffer, dtype=ELEMENT_DTYPE, count=k, offset=offset)


IPV4_HEADER_WORDS = struct.Struct("!10H")
"""An option-less IPv4 header as the 16-bit words its checksum sums."""
IPV4_CHECKSUM_WORD = 5
"""hdrChecksum's position among them."""


def ipv4_checksum(buffer: bytes | bytearray | memoryview, offset: int = 0) -> int:
    """RFC 791 checksum of the 20-byte IPv4 header at ``offset``, whatever its checksum field holds.

    The field itself is left out of the sum (as if zero), like P4's update_checksum over
    the header's other fields, so a stale or wrong checksum does not need clearing first.
    """
    words = IPV4_HEADER_WORDS.unpack_from(buffer, offset)
    total = sum(words) - words[IPV4_CHECKSUM_WORD]
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def mac_to_bytes(mac: str) -> bytes:
    """'02:00:00:00:00:01' -> 6 bytes, with a clear error for anything else."""
    parts = mac.split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise ValueError(f"not a MAC address: {mac!r}")
    return bytes(int(p, 16) for p in parts)


def ipv4_to_bytes(address: str) -> bytes:
    """'10.0.0.1' -> 4 bytes, with a clear error for anything else."""
    parts = address.split(".")
    if len(parts) != 4 or not all(p.isdigit() and int(p) < 256 for p in parts):
        raise ValueError(f"not an IPv4 address: {address!r}")
    return bytes(int(p) for p in parts)


@dataclass(frozen=True)
class Endpoint:
    """Where a frame comes from or goes to: Ethernet, IPv4 and UDP addresses."""

    mac: str
    ipv4: str
    udp_port: int


def build_frame(src: Endpoint, dst: Endpoint, payload: bytes, ttl: int = 64) -> bytes:
    """A complete Ethernet/IPv4/UDP frame (UDP checksum 0) around a UDP payload.

    Used by tests and benchmarks that inject raw frames, and by the embedded switch to
    precompute per-rank result headers.
    """
    udp_length = UDP_HEADER_BYTES + len(payload)
    ip_header = bytearray(
        struct.pack(
            "!BBHHHBBH4s4s",
            0x45,
            0,
            IPV4_HEADER_BYTES + udp_length,
            0,
            0x4000,  # don't fragment
            ttl,
            IPPROTO_UDP,
            0,
            ipv4_to_bytes(src.ipv4),
            ipv4_to_bytes(dst.ipv4),
        )
    )
    struct.pack_into("!H", ip_header, 10, ipv4_checksum(ip_header))
    eth = mac_to_bytes(dst.mac) + mac_to_bytes(src.mac) + struct.pack("!H", ETHERTYPE_IPV4)
    udp = struct.pack("!HHHH", src.udp_port, dst.udp_port, udp_length, 0)
    return eth + bytes(ip_header) + udp + payload
