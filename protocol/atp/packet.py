"""The ATP packet, defined once for every Python component (hot path: struct and numpy).

Layout, the same k int32 values per packet as SwitchML so the two designs' frames compare::

    Ethernet 14 | IPv4 20 | UDP 8 (checksum 0, dst port in ATP's range) | atp_h 16 | k x int32 (big-endian)
    atp_h: bitmap 32 | fan_in 8 | flags 8 | app_id 16 | seq 32 | agtr 16 | new_agtr 16

Differences from the authors' header (docs/dataplane-atp.md, "Packet"): one pass of k values,
so one aggregator index (no agtr2, dataIndex); one PS per job (no PSIndex); a 32-bit sequence
that keeps counting across a job's all-reduces, so the owner tag app_id|seq is never reused by
a late packet of an earlier tensor (the authors' 16-bit sequence restarts per tensor); the
collision's new index in new_agtr rather than in the hosts-only len_tensor trailer.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from protocol.atp import params
from protocol.packet import ELEMENT_BYTES, ELEMENT_DTYPE, UDP_OFFSET, UDP_HEADER_BYTES, max_elements

ATP_HEADER = struct.Struct("!IBBHIHH")
ATP_HEADER_BYTES = ATP_HEADER.size
if ATP_HEADER_BYTES != params.P4_CONSTANTS["ATP_HEADER_BYTES"]:
    raise RuntimeError(f"atp_h is {ATP_HEADER_BYTES} bytes here but ATP_HEADER_BYTES in {params.CONSTANTS_P4} says otherwise")
ATP_OFFSET = UDP_OFFSET + UDP_HEADER_BYTES
DATA_OFFSET = ATP_OFFSET + ATP_HEADER_BYTES
MAX_K = max_elements(ATP_HEADER_BYTES)
"""The most values one ATP packet can carry without exceeding the MTU (364)."""
SEQ_LIMIT = 1 << 32
"""Sequences run 1 .. 2^32 - 1 over a job's life; 0 (with app_id 0) would read as a free owner."""


class ATPHeader(NamedTuple):
    """atp_h's fields in wire order."""

    bitmap: int
    fan_in: int
    flags: int
    app_id: int
    seq: int
    agtr: int
    new_agtr: int


FIELD_OFFSETS: dict[str, int] = {
    name: struct.calcsize("!" + ATP_HEADER.format.lstrip("!")[:i]) for i, name in enumerate(ATPHeader._fields)
}
"""Where each field starts within atp_h."""


def owner_tag(app_id: int, seq: int) -> int:
    """The aggregator's owner register value for (app_id, seq): 48 bits, 0 = free."""
    return app_id << 32 | seq


def payload_bytes(k: int) -> int:
    """UDP payload size of an ATP packet carrying k values."""
    return ATP_HEADER_BYTES + k * ELEMENT_BYTES


def frame_bytes(k: int) -> int:
    """Ethernet frame size (without FCS) of an ATP packet carrying k values."""
    return DATA_OFFSET + k * ELEMENT_BYTES


def encode_payload(header: ATPHeader, values: np.ndarray) -> bytes:
    """atp_h + values (any int32 array, sent big-endian): one UDP payload."""
    return ATP_HEADER.pack(*header) + np.asarray(values, dtype=ELEMENT_DTYPE).tobytes()


def decode_payload(payload: bytes | bytearray | memoryview, k: int) -> tuple[ATPHeader, np.ndarray] | None:
    """(header, values as a read-only big-endian view), or None unless exactly atp_h + k values."""
    if len(payload) != payload_bytes(k):
        return None
    return ATPHeader._make(ATP_HEADER.unpack_from(payload)), np.frombuffer(payload, ELEMENT_DTYPE, k, ATP_HEADER_BYTES)
