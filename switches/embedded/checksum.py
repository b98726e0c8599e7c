"""SwitchMLComputeChecksum for the frames the embedded switch forwards as they came.

checksum.p4 recomputes the IPv4 header checksum of every departing packet whose ipv4
header is valid (the parser extracted it: etherType 0x0800 and 20 bytes after Ethernet)
and has ihl 5, whatever else the packet is. Results get theirs in their precomputed
headers (parser.py: result_address_headers); everything else that leaves, i.e. ordinary traffic and
updates a pass-through switch forwards, gets it here, so a wrong checksum leaves
corrected, as on bmv2. A tagged frame (etherType 0x8100), a truncated IPv4 header or one
with options (ihl != 5) leaves untouched, as on bmv2.
"""

from __future__ import annotations

import struct

from protocol.packet import ETHERTYPE_IPV4, IPV4_OFFSET, UDP_OFFSET, ipv4_checksum

ETHERTYPE_OFFSET = 12
CHECKSUM_OFFSET = IPV4_OFFSET + 10
CHECKSUM_FIELD = struct.Struct("!H")
IHL_MASK = 0x0F
OPTIONLESS_IHL = 5


def compute_checksum(frame: bytearray, length: int) -> None:
    """update_checksum(hdr.ipv4.isValid() && hdr.ipv4.ihl == 5, ...) on ``frame[:length]``."""
    if (
        length >= UDP_OFFSET
        and frame[ETHERTYPE_OFFSET] << 8 | frame[ETHERTYPE_OFFSET + 1] == ETHERTYPE_IPV4
        and frame[IPV4_OFFSET] & IHL_MASK == OPTIONLESS_IHL
    ):
        CHECKSUM_FIELD.pack_into(frame, CHECKSUM_OFFSET, ipv4_checksum(frame, IPV4_OFFSET))
