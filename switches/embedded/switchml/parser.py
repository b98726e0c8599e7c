"""SwitchMLParser over one preallocated frame buffer.

The switch receives every frame into the same ``PacketBuffer`` (ports.py), parses it with
one ``struct`` call at the fixed offsets of protocol/switchml/packet.py and writes results
back into the same bytes, so the data path allocates no per-packet buffers. The address
headers before switchml_h, and the per-rank result headers SwitchMLDeparser emits, are every
protocol's (switches/embedded/parser.py).
"""

from __future__ import annotations

import struct

import numpy as np

from protocol.packet import ELEMENT_DTYPE, ETHERTYPE_IPV4, IPPROTO_UDP
from protocol.switchml import params
from protocol.switchml.packet import DATA_OFFSET, SWITCHML_FIELD_OFFSETS, SWITCHML_HEADER, SWITCHML_OFFSET, SwitchMLHeader, frame_bytes
from switches.embedded.parser import (
    ADDRESS_FIELDS,
    ADDRESS_HEADERS,
    ADDRESS_HEADERS_BYTES,
    ETHERNET_ETHER_TYPE,
    IPV4_PROTOCOL,
    IPV4_VERSION_IHL,
    MAX_FRAME_BYTES,
    UDP_DST_PORT,
)

PARSE = struct.Struct(ADDRESS_HEADERS.format + SWITCHML_HEADER.format.lstrip("!"))
"""Everything up to the elements in one unpack: the address headers' fields, then switchml_h."""
assert ADDRESS_HEADERS_BYTES == SWITCHML_OFFSET and PARSE.size == DATA_OFFSET

# Where each switchml_h field is in parse()'s tuple, after the address headers' fields
# (named as p4/switchml/include/headers.p4 names them, hdr.switchml.<field>).
(SWITCHML_MSG_TYPE, SWITCHML_SHADOW_SET, SWITCHML_JOB_ID, SWITCHML_SLOT, SWITCHML_NUM_ELEMENTS,
 SWITCHML_EXPONENT, SWITCHML_SEQ) = range(ADDRESS_FIELDS, ADDRESS_FIELDS + len(SwitchMLHeader._fields))  # fmt: skip
assert len(PARSE.unpack(bytes(PARSE.size))) == SWITCHML_SEQ + 1

MSG_TYPE_OFFSET = SWITCHML_FIELD_OFFSETS["msg_type"]
EXPONENT_OFFSET = SWITCHML_FIELD_OFFSETS["exponent"]

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
            ethertype, ver_ihl, proto, _src, _dst, _sport, dport, _ulen = ADDRESS_HEADERS.unpack_from(frame)
            if ethertype == ETHERTYPE_IPV4 and ver_ihl & 0x0F == 5 and proto == IPPROTO_UDP and params.is_aggregation_port(dport):
                return PARSER_ERROR
        return None
