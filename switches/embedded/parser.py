"""The address headers every protocol's parser on the embedded switch reads first.

Ethernet, option-less IPv4 and UDP at the fixed offsets of protocol/packet.py, read with one
``struct`` call, and the result addressing that a protocol's egress writes into each copy
of a result (source := the address the packet was sent to, destination := the worker's).
Each protocol's own parser (``switchml/parser.py``, ``atp/parser.py``) appends its header's
fields to ``ADDRESS_HEADERS`` and keeps these index names for the fields before them.
"""

from __future__ import annotations

import struct

from protocol.packet import ETH_HEADER_BYTES, IPV4_OFFSET, PAYLOAD_OFFSET, UDP_OFFSET, ipv4_checksum

MAX_FRAME_BYTES = 65536 + 64
"""Receive buffer size: large enough for any frame a veth can hand over (even GSO)."""

ADDRESS_HEADERS = struct.Struct("!12xHB8xB2xIIHHH2x")
"""etherType, version/ihl, protocol, srcAddr, dstAddr, UDP srcPort, dstPort, length."""
ADDRESS_HEADERS_BYTES = PAYLOAD_OFFSET
"""Ethernet + IPv4 + UDP: the bytes a result's per-rank rewrite replaces."""
assert ADDRESS_HEADERS.size == ADDRESS_HEADERS_BYTES

# Where each field is in a parse tuple, named as the P4 programs name it
# (hdr.<header>.<field>): plain ints, so that the per-packet code indexes a tuple.
(ETHERNET_ETHER_TYPE, IPV4_VERSION_IHL, IPV4_PROTOCOL, IPV4_SRC_ADDR, IPV4_DST_ADDR,
 UDP_SRC_PORT, UDP_DST_PORT, UDP_LENGTH) = range(8)  # fmt: skip
ADDRESS_FIELDS = UDP_LENGTH + 1
"""Fields of ``ADDRESS_HEADERS``: a protocol header's first field has this index."""


def result_address_headers(update_headers: bytes, mac: int, ipv4: int, udp_port: int) -> bytes:
    """The address headers of a result copy for one worker, as ingress and egress leave them.

    Ingress answers from the address the packet was sent to (source := its destination);
    egress writes the worker's MAC/IPv4/UDP port; the checksum control recomputes the IPv4
    checksum. All three depend only on the packet's address headers and the worker, so a
    caller may cache the result per (headers, worker).
    """
    eth_src = update_headers[0:6]
    ip = bytearray(update_headers[IPV4_OFFSET:UDP_OFFSET])
    ip[12:16] = ip[16:20]  # srcAddr := the update's dstAddr
    ip[16:20] = ipv4.to_bytes(4, "big")
    struct.pack_into("!H", ip, 10, ipv4_checksum(ip))
    udp = bytearray(update_headers[UDP_OFFSET:PAYLOAD_OFFSET])
    udp[0:2] = udp[2:4]  # srcPort := the update's dstPort
    struct.pack_into("!H", udp, 2, udp_port)
    udp[6:8] = b"\0\0"
    eth = mac.to_bytes(6, "big") + eth_src + update_headers[ETH_HEADER_BYTES - 2 : ETH_HEADER_BYTES]
    return eth + bytes(ip) + bytes(udp)
