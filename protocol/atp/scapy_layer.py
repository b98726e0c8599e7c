"""scapy layer for ATP: dissection, pcaps and tests (never the hot path).

Same layout as ``protocol/atp/packet.py``; importing this module binds the layer to UDP on
ATP's ports, so ``Ether(frame)`` shows atp_h and its values.
"""

from __future__ import annotations

from scapy.fields import ByteField, FieldListField, FlagsField, IntField, ShortField, SignedIntField
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from protocol.atp import params
from protocol.atp.packet import MAX_K

FLAG_NAMES = ["ack", "collision", "resend", "ecn", "", "", "", "overflow"]
"""FlagsField names, least significant bit first (params.FLAG_*)."""


class ATP(Packet):
    """atp_h followed by the int32 values that fill the rest of the UDP payload."""

    name = "ATP"
    fields_desc = [
        IntField("bitmap", 0),
        ByteField("fan_in", 0),
        FlagsField("flags", 0, 8, FLAG_NAMES),
        ShortField("app_id", 0),
        IntField("seq", 1),
        ShortField("agtr", 0),
        ShortField("new_agtr", params.NO_INDEX),
        FieldListField("values", [], SignedIntField("", 0), max_count=MAX_K),
    ]


for _port in range(params.UDP_PORT_BASE, params.UDP_PORT_BASE + (~params.UDP_PORT_MASK & 0xFFFF) + 1):
    bind_layers(UDP, ATP, dport=_port)
