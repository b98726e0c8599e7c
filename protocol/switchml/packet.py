"""The SwitchML packet, defined once for every Python component.

Two views of the same bytes:

* the hot path (worker library, embedded switch) uses the ``struct``/numpy definitions
  here directly: fixed offsets, one ``struct.Struct`` for the SwitchML header and a
  big-endian int32 numpy dtype for the elements, so no per-packet objects are built;
* tests, pcaps and debugging use the scapy layer in ``protocol/switchml/scapy_layer.py``, kept
  apart so that workers and the switch never pay for importing scapy.

Layout (must match ``p4/include/headers.p4``; ``tests/test_p4_contract.py`` checks it)::

    Ethernet 14 | IPv4 20 | UDP 8 (checksum 0) | switchml_h 13 | k x int32 (big-endian)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from protocol import params

ETH_HEADER_BYTES = 14
IPV4_HEADER_BYTES = 20
UDP_HEADER_BYTES = 8
ETHERTYPE_IPV4 = 0x0800
IPPROTO_UDP = 17

ETH_OFFSET = 0
IPV4_OFFSET = ETH_OFFSET + ETH_HEADER_BYTES
UDP_OFFSET = IPV4_OFFSET + IPV4_HEADER_BYTES
SWITCHML_OFFSET = UDP_OFFSET + UDP_HEADER_BYTES

SWITCHML_HEADER = struct.Struct("!BBHHHbI")
"""switchml_h: msg_type, shadow_set, job_id, slot, num_elements (16 bits: k reaches 256),
exponent (int8), seq. 13 bytes, so the elements start at an odd offset (no field needs alignment
on the wire; numpy and the eBPF loads read them unaligned)."""
SWITCHML_HEADER_BYTES = SWITCHML_HEADER.size
if SWITCHML_HEADER_BYTES != params.P4_CONSTANTS["SWITCHML_HEADER_BYTES"]:
    raise RuntimeError(f"switchml_h is {SWITCHML_HEADER_BYTES} bytes here, SWITCHML_HEADER_BYTES in {params.CONSTANTS_P4} says otherwise")
DATA_OFFSET = SWITCHML_OFFSET + SWITCHML_HEADER_BYTES

ELEMENT_DTYPE = np.dtype(">i4")
"""Elements travel as big-endian two's complement int32."""
ELEMENT_BYTES = ELEMENT_DTYPE.itemsize

IPV4_MTU = 1500
"""The hosts' and switches' interface MTU (Linux's default for veths)."""
MAX_K = (IPV4_MTU - IPV4_HEADER_BYTES - UDP_HEADER_BYTES - SWITCHML_HEADER_BYTES) // ELEMENT_BYTES
"""The most elements one packet can carry without exceeding the MTU (364); experiments use the
k the switch programs are built for (protocol.params.K_CHOICES)."""

EXPONENT_MIN = -128
EXPONENT_MAX = 127
"""Range of the int8 exponent field."""


class SwitchMLHeader(NamedTuple):
    """The decoded fields of switchml_h, in wire order."""

    msg_type: int
    shadow_set: int
    job_id: int
    slot: int
    num_elements: int
    exponent: int
    seq: int


SWITCHML_FIELD_OFFSETS: dict[str, int] = {
    name: SWITCHML_OFFSET + struct.calcsize("!" + SWITCHML_HEADER.format.lstrip("!")[:i])
    for i, name in enumerate(SwitchMLHeader._fields)
}
"""Where each switchml_h field starts in a frame: for code that rewrites one field in place."""


def payload_bytes(k: int) -> int:
    """UDP payload size of a packet carrying k elements."""
    return SWITCHML_HEADER_BYTES + k * ELEMENT_BYTES


def payload_dtype(k: int) -> np.dtype:
    """switchml_h and k elements as one numpy record, byte for byte the UDP payload.

    Lets a worker build and parse whole batches of packets with array operations: a
    (B,) array of these records is B payloads back to back, ready for sendmmsg.
    """
    return np.dtype([
        ("msg_type", "u1"), ("shadow_set", "u1"), ("job_id", ">u2"), ("slot", ">u2"),
        ("num_elements", ">u2"), ("exponent", "i1"), ("seq", ">u4"), ("data", ELEMENT_DTYPE, (k,)),
    ])


def frame_bytes(k: int) -> int:
    """Ethernet frame size (without FCS) of a packet carrying k elements."""
    return DATA_OFFSET + k * ELEMENT_BYTES


def pack_header(buffer: bytearray | memoryview, offset: int, header: SwitchMLHeader) -> None:
    """Write switchml_h into ``buffer`` at ``offset``."""
    SWITCHML_HEADER.pack_into(buffer, offset, *header)


def unpack_header(buffer: bytes | bytearray | memoryview, offset: int = 0) -> SwitchMLHeader:
    """Read switchml_h from ``buffer`` at ``offset``."""
    return SwitchMLHeader._make(SWITCHML_HEADER.unpack_from(buffer, offset))


def encode_payload(header: SwitchMLHeader, elements: np.ndarray) -> bytes:
    """UDP payload (switchml_h + elements) for ``elements`` given as any int32 array."""
    if len(elements) != header.num_elements:
        raise ValueError(f"header says {header.num_elements} elements, got {len(elements)}")
    return SWITCHML_HEADER.pack(*header) + np.asarray(elements, dtype=ELEMENT_DTYPE).tobytes()


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
