"""The two UDP sockets an ATP host speaks on, and their batches of fixed-size payloads.

A worker sends to its PS but hears results from the switch; the PS hears every worker but
sends to the switch. A connected UDP socket hears only its peer, so each has a socket to
receive on (connected to whoever may send to it, or not at all) and one connected to where
it sends. Both carry ATP payloads of one size (``payload_bytes(k)``) in recvmmsg/sendmmsg
batches (hosts/mmsg.py).
"""

from __future__ import annotations

import numpy as np

from hosts.mmsg import BatchSocket, datagram_socket
from protocol.atp.packet import payload_bytes


class PayloadSockets:
    """Receive on ``bind`` (from ``peer`` only, if given); send from ``bind``'s address to ``destination``."""

    def __init__(self, k: int, capacity: int, bind: tuple[str, int], destination: tuple[str, int],
                 peer: tuple[str, int] | None = None) -> None:
        self.size = payload_bytes(k)
        dtype = np.dtype((np.void, self.size))
        self.receiving = datagram_socket(bind, peer)
        try:
            self.sending = datagram_socket((bind[0], 0), destination)
        except OSError:
            self.receiving.close()
            raise
        self.rx = BatchSocket(self.receiving, dtype, capacity)
        """Its ``receive()``, ``rx[i]`` and ``lengths[i]`` are a batch of what arrived."""
        self._tx = BatchSocket(self.sending, dtype, capacity)
        self._tx_rows = self._tx.tx.view(np.uint8).reshape(capacity, self.size)

    @property
    def refusals(self):
        """errno -> datagrams the kernel refused or reported lost, both sockets (BatchSocket.refusals)."""
        return self._tx.refusals + self.rx.refusals

    def payload(self, i: int) -> bytes | None:
        """The i-th datagram of the last batch received, or None if it is not one payload long."""
        return self.rx.rx[i].tobytes() if self.rx.lengths[i] == self.size else None

    def send(self, payloads: list[bytes]) -> None:
        """Send ``payloads`` (each ``size`` bytes) in batches of the socket's capacity; a datagram
        the kernel refuses is lost like one dropped on the wire (the protocol's resends recover it)."""
        capacity = self._tx.capacity
        for start in range(0, len(payloads), capacity):
            batch = payloads[start:start + capacity]
            self._tx_rows[:len(batch)] = np.frombuffer(b"".join(batch), np.uint8).reshape(len(batch), self.size)
            self._tx.send(len(batch))

    def close(self) -> None:
        self.receiving.close()
        self.sending.close()
