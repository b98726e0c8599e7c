"""The SwitchML packet, defined once for every Python component.

Two views of the same bytes:

* the hot path (worker library, embedded switch) uses the ``struct``/numpy definitions
  here directly: fixed offsets, one ``struct.Struct`` for the SwitchML header, and the
  shared frame and element type of ``protocol/packet.py``, so no per-packet objects are built;
* tests, pcaps and debugging use the scapy layer in ``protocol/switchml/scapy_layer.py``, kept
  apart so that workers and the switch never pay for importing scapy.

Layout (must match ``p4/switchml/include/headers.p4``; ``tests/test_p4_contract.py`` checks it)::

    Ethernet 14 | IPv4 20 | UDP 8 (checksum 0) | switchml_h 13 | k x int32 (big-endian)
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from protocol.packet import ELEMENT_BYTES, ELEMENT_DTYPE, PAYLOAD_OFFSET, max_elements
from protocol.switchml import params

SWITCHML_OFFSET = PAYLOAD_OFFSET

SWITCHML_HEADER = struct.Struct("!BBHHHbI")
"""switchml_h: msg_type, shadow_set, job_id, slot, num_elements (16 bits: k reaches 256),
exponent (int8), seq. 13 bytes, so the elements start at an odd offset (no field needs alignment
on the wire; numpy and the eBPF loads read them unaligned)."""
SWITCHML_HEADER_BYTES = SWITCHML_HEADER.size
if SWITCHML_HEADER_BYTES != params.P4_CONSTANTS["SWITCHML_HEADER_BYTES"]:
    raise RuntimeError(f"switchml_h is {SWITCHML_HEADER_BYTES} bytes here, SWITCHML_HEADER_BYTES in {params.CONSTANTS_P4} says otherwise")
DATA_OFFSET = SWITCHML_OFFSET + SWITCHML_HEADER_BYTES
MAX_SLOT_LIMIT = 0xFFFF
"""switchml_h.slot is 16 bits wide: the most slots any switch's pool has (the P4 program
compares the slot with the pool size)."""

MAX_K = max_elements(SWITCHML_HEADER_BYTES)
"""The most elements one SwitchML packet can carry without exceeding the MTU (364); experiments
use the k the switch programs are built for (protocol.switchml.params.K_CHOICES)."""


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
