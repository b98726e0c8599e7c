"""scapy layer for SwitchML: dissection, pcaps and tests (never the hot path).

Same layout as ``protocol/switchml/packet.py`` (which the hot path uses without scapy): importing
this module binds the layer to UDP on every aggregation port, so ``Ether(frame)`` shows
SwitchML headers and elements.
"""

from __future__ import annotations

from scapy.fields import (
    ByteEnumField,
    ByteField,
    FieldListField,
    IntField,
    ShortField,
    SignedByteField,
    SignedIntField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, bind_layers

from protocol.switchml import params
from protocol.switchml.packet import MAX_K



class SwitchML(Packet):
    """scapy layer for switchml_h followed by its num_elements int32 elements."""

    name = "SwitchML"
    fields_desc = [
        ByteEnumField("msg_type", params.MSG_UPDATE, {params.MSG_UPDATE: "update", params.MSG_RESULT: "result"}),
        ByteField("shadow_set", 0),
        ShortField("job_id", 0),
        ShortField("slot", 0),
        ShortField("num_elements", None),
        SignedByteField("exponent", 0),
        IntField("seq", 0),
        FieldListField(
            "elements",
            [],
            SignedIntField("", 0),
            count_from=lambda pkt: pkt.num_elements,
            max_count=MAX_K,  # scapy's default limit (100) is below the k = 256 this testbed sends
        ),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        if self.num_elements is None:
            pkt = pkt[:6] + len(self.elements).to_bytes(2, "big") + pkt[8:]
        return pkt + pay


for _port in range(params.UDP_PORT_BASE, params.UDP_PORT_BASE + (~params.UDP_PORT_MASK & 0xFFFF) + 1):
    bind_layers(UDP, SwitchML, dport=_port)
    bind_layers(UDP, SwitchML, sport=_port)
