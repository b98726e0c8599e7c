"""SwitchMLParser and SwitchMLDeparser over one preallocated frame buffer.

The switch receives every frame into the same ``PacketBuffer`` (ports.py), parses it with
one ``struct`` call at the fixed offsets of protocol/packet.py and writes results back
into the same bytes, so the data path allocates no per-packet buffers. The deparser's
per-rank result headers are built once per (update header, rank) and then copied in.
"""

from __future__ import annotations

import struct

import numpy as np

from protocol import params
from protocol.packet import (
    DATA_OFFSET,
    ELEMENT_DTYPE,
    ETH_HEADER_BYTES,
    ETHERTYPE_IPV4,
    IPPROTO_UDP,
    IPV4_OFFSET,
    SWITCHML_FIELD_OFFSETS,
    SWITCHML_HEADER,
    SWITCHML_OFFSET,
    UDP_OFFSET,
    SwitchMLHeader,
    frame_bytes,
    ipv4_checksum,
)

MAX_FRAME_BYTES = 65536 + 64
"""Receive buffer size: large enough for any frame a veth can hand over (even GSO)."""

HEADERS_TO_SWITCHML = struct.Struct("!12xHB8xB2xIIHHH2x")
"""etherType, version/ihl, protocol, srcAddr, dstAddr, UDP srcPort, dstPort, length."""
PARSE = struct.Struct(HEADERS_TO_SWITCHML.format + SWITCHML_HEADER.format.lstrip("!"))
"""Everything up to the elements in one unpack: the fields above, then switchml_h."""
assert HEADERS_TO_SWITCHML.size == SWITCHML_OFFSET and PARSE.size == DATA_OFFSET

# Where each field is in parse()'s tuple, named as p4/include/headers.p4 names it
# (hdr.<header>.<field>): plain ints, so that the per-packet code indexes a tuple as before.
(ETHERNET_ETHER_TYPE, IPV4_VERSION_IHL, IPV4_PROTOCOL, IPV4_SRC_ADDR, IPV4_DST_ADDR,
 UDP_SRC_PORT, UDP_DST_PORT, UDP_LENGTH) = range(8)  # fmt: skip
(SWITCHML_MSG_TYPE, SWITCHML_SHADOW_SET, SWITCHML_JOB_ID, SWITCHML_SLOT, SWITCHML_NUM_ELEMENTS,
 SWITCHML_EXPONENT, SWITCHML_SEQ) = range(UDP_LENGTH + 1, UDP_LENGTH + 1 + len(SwitchMLHeader._fields))  # fmt: skip
assert len(PARSE.unpack(bytes(PARSE.size))) == SWITCHML_SEQ + 1

MSG_TYPE_OFFSET = SWITCHML_FIELD_OFFSETS["msg_type"]
EXPONENT_OFFSET = SWITCHML_FIELD_OFFSETS["exponent"]
ADDRESS_HEADERS_BYTES = SWITCHML_OFFSET
"""Ethernet + IPv4 + UDP: the bytes a result's per-rank rewrite replaces."""

PARSER_ERROR = ()
"""parse() result for an aggregation packet too short for switchml_h + k elements."""


class PacketBuffer:
    """The one frame buffer of the data path, with typed views at the P4 header offsets."""

    def __init__(self, k: int) -> None:
        self.frame = bytearray(MAX_FRAME_BYTES)
        self.view = memoryview(self.frame)
        self.data = np.frombuffer(self.frame, dtype=ELEMENT_DTYPE, count=k, offset=DATA_OFFSET)
        """hdr.data.d00..dXX: big-endian int32 view into the frame (reads and writes)."""
        self.result_view = self.view[: frame_bytes(k)]
        """What a result deparses to: headers + switchml_h + k elements."""


class SwitchMLParser:
    """ethernet -> ipv4 (ihl 5) -> udp -> switchml + data when dstPort is an aggregation port."""

    def __init__(self, k: int) -> None:
        self.min_switchml_frame = frame_bytes(k)

    def parse(self, frame: bytearray, length: int) -> tuple | None:
        """``PARSE`` fields of a SwitchML packet, PARSER_ERROR if truncated, None if ordinary."""
        if length >= DATA_OFFSET:
            fields = PARSE.unpack_from(frame)
            if (
                fields[ETHERNET_ETHER_TYPE] == ETHERTYPE_IPV4
                and fields[IPV4_VERSION_IHL] & 0x0F == 5
                and fields[IPV4_PROTOCOL] == IPPROTO_UDP
                and fields[UDP_DST_PORT] & params.UDP_PORT_MASK == params.UDP_PORT_BASE
            ):
                return fields if length >= self.min_switchml_frame else PARSER_ERROR
            return None
        if length >= SWITCHML_OFFSET:
            ethertype, ver_ihl, proto, _src, _dst, _sport, dport, _ulen = HEADERS_TO_SWITCHML.unpack_from(frame)
            if ethertype == ETHERTYPE_IPV4 and ver_ihl & 0x0F == 5 and proto == IPPROTO_UDP and params.is_aggregation_port(dport):
                return PARSER_ERROR
        return None


class SwitchMLDeparser:
    """Builds the address headers of a result as SwitchMLIngress + SwitchMLEgress leave them.

    Ingress answers from the address the update was sent to (source := update's
    destination); egress writes the rank's MAC/IPv4/UDP port; SwitchMLComputeChecksum
    recomputes the IPv4 checksum. All three only depend on the update's address headers
    and the rank, so the result is precomputed per (update headers, rank).
    """

    @staticmethod
    def result_headers(update_headers: bytes, mac: int, ipv4: int, udp_port: int) -> bytes:
        eth_src = update_headers[0:6]
        ip = bytearray(update_headers[IPV4_OFFSET:UDP_OFFSET])
        ip[12:16] = ip[16:20]  # srcAddr := the update's dstAddr
        ip[16:20] = ipv4.to_bytes(4, "big")
        struct.pack_into("!H", ip, 10, ipv4_checksum(ip))
        udp = bytearray(update_headers[UDP_OFFSET:SWITCHML_OFFSET])
        udp[0:2] = udp[2:4]  # srcPort := the update's dstPort
        struct.pack_into("!H", udp, 2, udp_port)
        udp[6:8] = b"\0\0"
        eth = mac.to_bytes(6, "big") + eth_src + update_headers[ETH_HEADER_BYTES - 2 : ETH_HEADER_BYTES]
        return eth + bytes(ip) + bytes(udp)
