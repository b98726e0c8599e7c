"""ATPParser: ethernet -> ipv4 (ihl 5) -> udp -> (dst port in ATP's range) atp_h -> k values.

One ``struct`` call reads every field the ingress matches on, at the fixed offsets of
protocol/atp/packet.py, into a tuple indexed by the names below (hdr.<header>.<field>).
"""

from __future__ import annotations

import struct

from protocol.atp import params
from protocol.atp.packet import ATP_HEADER, ATPHeader, frame_bytes
from protocol.packet import ETHERTYPE_IPV4, IPPROTO_UDP
from switches.embedded.parser import ADDRESS_FIELDS, ADDRESS_HEADERS

PARSE = struct.Struct(ADDRESS_HEADERS.format + ATP_HEADER.format.lstrip("!"))
"""etherType, version/ihl, protocol, srcAddr, dstAddr, UDP srcPort, dstPort, length, then atp_h."""

(ATP_BITMAP, ATP_FAN_IN, ATP_FLAGS, ATP_APP_ID, ATP_SEQ, ATP_AGTR, ATP_NEW_AGTR) = range(
    ADDRESS_FIELDS, ADDRESS_FIELDS + len(ATPHeader._fields))  # fmt: skip
"""Where each atp_h field is in a parse tuple, after the address headers' (switches/embedded/parser.py)."""

PARSER_ERROR = ()
"""parse() of a frame on an ATP port that is not exactly atp_h + k values."""


class ATPParser:
    def __init__(self, k: int) -> None:
        self.frame_bytes = frame_bytes(k)

    def parse(self, frame: bytes | bytearray) -> tuple | None:
        """The PARSE fields of an ATP packet, PARSER_ERROR if its length is wrong, None if ordinary."""
        if len(frame) < ADDRESS_HEADERS.size:
            return None
        ethertype, ver_ihl, protocol, *_, dst_port, _length = ADDRESS_HEADERS.unpack_from(frame)
        if ethertype != ETHERTYPE_IPV4 or ver_ihl & 0x0F != 5 or protocol != IPPROTO_UDP or not params.is_atp_port(dst_port):
            return None
        if len(frame) != self.frame_bytes:
            return PARSER_ERROR
        return PARSE.unpack_from(frame)
