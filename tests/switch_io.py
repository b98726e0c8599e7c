"""Crafting SwitchML frames and capturing what a switch sends, for packet-level tests.

Frames are built with protocol.switchml.packet (the bytes the worker library sends); captures are
dissected with scapy. ``SwitchPorts`` holds one raw socket per host of a Testbed and
collects frames until the expected number arrived plus a short grace period, so tests
wait only as long as the switch needs. Frames are captured as they were on the wire, with
their 802.1Q tag (the kernel strips it; the switch's own port receiver puts it back).
"""

from __future__ import annotations

import select
import socket
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Packet

from protocol import params
from protocol.switchml import params as switchml_params
from protocol.packet import build_frame, Endpoint
from protocol.switchml.packet import encode_payload, SWITCHML_FIELD_OFFSETS, SWITCHML_OFFSET, SwitchMLHeader
from protocol.switchml.scapy_layer import SwitchML
from switches.switchml import programming
from switches.control import SwitchControl
from switches.embedded.ports import ETH_P_8021Q, MAC_ADDRESSES_BYTES, VLAN_TAG, WireFrameReceiver
from base.netns import Host, Testbed

SWITCH = Endpoint(params.SWITCH_MAC, params.SWITCH_IPV4, switchml_params.UDP_PORT_BASE)
"""Where workers send updates: the switch's virtual address."""
GRACE_S = 0.1
"""After the expected frames, how long to wait for unexpected extra ones."""
TIMEOUT_S = 3.0
CAPTURE_BUFFER_BYTES = 65536
"""Room for any frame a test sends, 802.1Q tag included."""
NUM_ELEMENTS = slice(SWITCHML_FIELD_OFFSETS["num_elements"] - SWITCHML_OFFSET, SWITCHML_FIELD_OFFSETS["exponent"] - SWITCHML_OFFSET)
"""Bytes of num_elements in the UDP payload (switchml_h: msg_type, shadow_set, job_id, slot, ...)."""


def worker_endpoint(host: Host) -> Endpoint:
    return Endpoint(host.mac, host.ipv4, switchml_params.WORKER_UDP_PORT)


def update_frame(
    host: Host,
    slot: int,
    shadow_set: int,
    elements: Sequence[int],
    job_id: int,
    exponent: int = 0,
    seq: int = 0,
    msg_type: int = switchml_params.MSG_UPDATE,
    num_elements: int | None = None,
) -> bytes:
    """An update from ``host`` to the switch, as the worker library would send it.

    ``num_elements`` overrides the header's element count (to craft a wrong-k packet).
    """
    values = np.asarray(elements, dtype=np.int32)
    header = SwitchMLHeader(msg_type, shadow_set, job_id, slot, len(values), exponent, seq)
    payload = bytearray(encode_payload(header, values))
    if num_elements is not None:
        payload[NUM_ELEMENTS] = num_elements.to_bytes(2, "big")
    return build_frame(worker_endpoint(host), SWITCH, bytes(payload))


def vlan_tagged(frame: bytes, tci: int, tpid: int = ETH_P_8021Q) -> bytes:
    """``frame`` with an 802.1Q (or, with tpid 0x88A8, 802.1ad) tag after its MAC addresses."""
    return frame[:MAC_ADDRESSES_BYTES] + VLAN_TAG.pack(tpid, tci) + frame[MAC_ADDRESSES_BYTES:]


@dataclass
class Received:
    """Frames captured per host index."""

    frames: dict[int, list[Packet]]

    def results(self, index: int) -> list[Packet]:
        return [f for f in self.frames[index] if SwitchML in f]

    def total(self) -> int:
        return sum(len(f) for f in self.frames.values())


class SwitchPorts:
    """One raw socket per host: send frames from a host, capture frames arriving at hosts."""

    def __init__(self, testbed: Testbed) -> None:
        self.hosts = testbed.hosts
        self.sockets: list[socket.socket] = []
        self._receivers: list[WireFrameReceiver] = []
        try:
            for host in self.hosts:
                self.sockets.append(host.raw_socket())
                self._receivers.append(WireFrameReceiver(self.sockets[-1], bytearray(CAPTURE_BUFFER_BYTES)))
        except BaseException:
            self.close()
            raise

    def send(self, index: int, frame: bytes) -> None:
        self.sockets[index].send(frame)

    def receive_frame(self, index: int) -> bytes | None:
        """The next frame queued at host ``index``, as on the wire; None if none is queued."""
        receiver = self._receivers[index]
        length = receiver.receive()
        return None if length is None else bytes(receiver.buffer[:length])

    def receive(self, expected: int, timeout: float = TIMEOUT_S, grace: float = GRACE_S) -> Received:
        """Capture until ``expected`` frames arrived in total, then ``grace`` more seconds."""
        frames: dict[int, list[Packet]] = {h.index: [] for h in self.hosts}
        by_fd = {s.fileno(): i for i, s in enumerate(self.sockets)}
        count = 0
        deadline = time.monotonic() + timeout
        grace_end = None if expected > 0 else time.monotonic() + grace
        while True:
            now = time.monotonic()
            end = grace_end if grace_end is not None else deadline
            if now >= end:
                return Received(frames)
            ready, _, _ = select.select(self.sockets, [], [], end - now)
            for sock in ready:
                index = by_fd[sock.fileno()]
                frame = self.receive_frame(index)
                if frame is not None:
                    frames[index].append(Ether(frame))
                    count += 1
            if count >= expected and grace_end is None:
                grace_end = time.monotonic() + grace

    def close(self) -> None:
        for sock in self.sockets:
            sock.close()


def dissect(frame: Packet) -> tuple[Ether, IP, UDP, SwitchML]:
    return frame[Ether], frame[IP], frame[UDP], frame[SwitchML]


LEARNING_WAIT_S = 5.0
"""How long a learning controller may lag behind the frame it learns from (bmv2's digests
reach it asynchronously; the embedded and eBPF switches learn in the data plane)."""


def learned_entries(control: SwitchControl, reference: int | None) -> int:
    """l2_table's size once it reached ``reference`` (a learning controller may lag), or
    what it is when that does not happen within LEARNING_WAIT_S; at once without a reference."""
    deadline = time.monotonic() + LEARNING_WAIT_S
    entries = control.table_num_entries(programming.L2_TABLE)
    while reference is not None and entries != reference and time.monotonic() < deadline:
        time.sleep(0.001)
        entries = control.table_num_entries(programming.L2_TABLE)
    return entries
