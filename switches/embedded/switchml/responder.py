"""SwitchMLIngress step 1b: the switch answers ARP and ICMP echo for its own addresses.

The P4 program parses an ARP header (etherType 0x0806) and the first four bytes of ICMP
(option-less IPv4, protocol 1), and ingress turns an ARP request for an address in
``switch_addr_table`` into its reply, and an echo request to one into an echo reply, in
place, back out of the ingress port. This module does the same on the frame buffer. The
SwitchML parser (parser.py) never looks at these frames: they are ordinary traffic to it.
"""

from __future__ import annotations

import struct

from protocol.switchml import params
from protocol.packet import ETH_HEADER_BYTES, ETHERTYPE_IPV4, IPV4_HEADER_BYTES, IPV4_OFFSET
from switches.embedded.tables import ExactMatchTable, Field

_C = params.P4_CONSTANTS
EV_ARP_REPLY = _C["EV_ARP_REPLY"]
EV_ICMP_ECHO_REPLY = _C["EV_ICMP_ECHO_REPLY"]
ETHERTYPE_ARP = _C["SWITCHML_ETHERTYPE_ARP"]
ARP_REQUEST = _C["SWITCHML_ARP_REQUEST"]
ARP_REPLY = _C["SWITCHML_ARP_REPLY"]
IPPROTO_ICMP = _C["SWITCHML_IPPROTO_ICMP"]
ICMP_ECHO_REQUEST = _C["SWITCHML_ICMP_ECHO_REQUEST"]
ICMP_ECHO_REPLY = _C["SWITCHML_ICMP_ECHO_REPLY"]

ETHERTYPE = struct.Struct("!12xH")
ARP_OFFSET = ETH_HEADER_BYTES
ARP = struct.Struct("!HHBBH6sI6sI")
"""arp_h: htype, ptype, hlen, plen, oper, sha, spa, tha, tpa."""
ARP_ETHERNET_IPV4 = (1, ETHERTYPE_IPV4, 6, 4, ARP_REQUEST)
"""htype, ptype, hlen, plen, oper of the ARP requests the switch answers."""
IPV4_FIELDS = struct.Struct("!B5xH1xB2xII")
"""version/ihl, flags/fragOffset, protocol, srcAddr, dstAddr."""
ICMP_OFFSET = IPV4_OFFSET + IPV4_HEADER_BYTES
ICMP = struct.Struct("!BBH")
"""icmp_h: type, code, checksum."""
MORE_FRAGMENTS_AND_OFFSET = 0x3FFF
OLD_TYPE_CODE_COMPLEMENT = ~(ICMP_ECHO_REQUEST << 8) & 0xFFFF
"""~m of RFC 1624 eqn. 3 for the echo request's type and code word (0x0800)."""


def switch_addr_table() -> ExactMatchTable:
    """SwitchMLIngress.switch_addr_table: the switch's IPv4 addresses -> set_switch_mac(mac)."""
    return ExactMatchTable(
        "SwitchMLIngress.switch_addr_table", [Field("meta.target_ipv4", 32)],
        {"set_switch_mac": [Field("mac", 48)], "NoAction": []}, default="NoAction",
        size=_C["SWITCHML_SWITCH_ADDR_TABLE_SIZE"],
    )


def echo_reply_checksum(checksum: int) -> int:
    """The ICMP checksum after type 8 -> 0 (code 0): ~(~HC + ~m + m'), m' = 0 (RFC 1624)."""
    total = (~checksum & 0xFFFF) + OLD_TYPE_CODE_COMPLEMENT
    return ~((total & 0xFFFF) + (total >> 16)) & 0xFFFF


def answer(frame: bytearray, length: int, table: ExactMatchTable) -> int | None:
    """Rewrite an ARP request for, or an ICMP echo request to, one of the table's addresses
    into its reply in place and return its event; None (frame untouched) for anything else."""
    if length < ARP_OFFSET:
        return None
    (ethertype,) = ETHERTYPE.unpack_from(frame)
    if ethertype == ETHERTYPE_ARP and length >= ARP_OFFSET + ARP.size:
        htype, ptype, hlen, plen, oper, sha, spa, _tha, tpa = ARP.unpack_from(frame, ARP_OFFSET)
        if (htype, ptype, hlen, plen, oper) != ARP_ETHERNET_IPV4:
            return None
        mac = _switch_mac(table, tpa)
        if mac is None:
            return None
        frame[0:12] = frame[6:12] + mac
        ARP.pack_into(frame, ARP_OFFSET, htype, ptype, hlen, plen, ARP_REPLY, mac, tpa, sha, spa)
        return EV_ARP_REPLY
    if ethertype == ETHERTYPE_IPV4 and length >= ICMP_OFFSET + ICMP.size:
        ver_ihl, fragment, protocol, src, dst = IPV4_FIELDS.unpack_from(frame, IPV4_OFFSET)
        if ver_ihl & 0x0F != 5 or protocol != IPPROTO_ICMP or fragment & MORE_FRAGMENTS_AND_OFFSET:
            return None
        icmp_type, code, checksum = ICMP.unpack_from(frame, ICMP_OFFSET)
        if icmp_type != ICMP_ECHO_REQUEST or code != 0:
            return None
        mac = _switch_mac(table, dst)
        if mac is None:
            return None
        frame[0:12] = frame[6:12] + mac
        struct.pack_into("!II", frame, IPV4_OFFSET + 12, dst, src)
        ICMP.pack_into(frame, ICMP_OFFSET, ICMP_ECHO_REPLY, code, echo_reply_checksum(checksum))
        return EV_ICMP_ECHO_REPLY
    return None


def _switch_mac(table: ExactMatchTable, ipv4: int) -> bytes | None:
    action, action_params = table.lookup((ipv4,))
    return action_params[0].to_bytes(6, "big") if action == "set_switch_mac" else None
