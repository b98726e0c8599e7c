"""A host's raw Ethernet endpoint: whole frames of one EtherType on its interface.

For a protocol whose frames carry no IP header (an EtherType of its own, as the tests' toy
sum has), a worker needs what the kernel's UDP socket gives the others: a socket that
receives only its protocol's frames and sends whole frames. An AF_PACKET socket bound to the
EtherType on the host's one interface (a Mininet host has exactly one besides the loopback)
does both; it ignores the frames it sends itself, which a packet socket would otherwise see
again, and its sends go through the interface's qdisc, where the testbed shapes the link.
"""

from __future__ import annotations

import select
import socket
import time

from base.linux_sockets import PACKET_IGNORE_OUTGOING, SOL_PACKET

MAX_FRAME_BYTES = 1518
"""An Ethernet frame with an 802.1Q tag, without its FCS."""


def only_interface() -> str:
    """The host's one interface other than the loopback; a ValueError naming them where it has several or none."""
    names = [name for _index, name in socket.if_nameindex() if name != "lo"]
    if len(names) != 1:
        raise ValueError(f"expected one interface besides lo, found {', '.join(names) or 'none'}; name the one to use")
    return names[0]


class EthernetEndpoint:
    """Frames of ``ethertype`` sent and received on ``interface`` (default: the host's only one)."""

    def __init__(self, ethertype: int, interface: str | None = None) -> None:
        self.interface = interface or only_interface()
        self._socket = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ethertype))
        try:
            self._socket.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            self._socket.bind((self.interface, ethertype))
        except BaseException:
            self._socket.close()
            raise

    def send(self, frame: bytes) -> None:
        """One whole frame, Ethernet header included."""
        self._socket.send(frame)

    def receive(self, deadline: float) -> bytes | None:
        """The next frame, or None once ``deadline`` (time.monotonic) passes without one."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self._socket], [], [], remaining)
            if ready:
                return self._socket.recv(MAX_FRAME_BYTES)

    def close(self) -> None:
        self._socket.close()

    def __enter__(self) -> EthernetEndpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
