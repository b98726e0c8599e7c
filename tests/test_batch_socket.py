"""hosts/mmsg.py: batches of datagrams through sendmmsg/recvmmsg, on loopback UDP,
and the payload record that the worker builds batches of (protocol.switchml.packet.payload_dtype)."""

from __future__ import annotations

import errno
import socket
from typing import Iterator

import numpy as np
import pytest

from hosts.mmsg import RECEIVE_SLACK_BYTES, BatchSocket
from protocol.switchml.packet import SWITCHML_HEADER_BYTES, SwitchMLHeader, pack_header, payload_bytes, payload_dtype, unpack_header
from tests.conftest import ON_LOOPBACK_GROUP

pytestmark = ON_LOOPBACK_GROUP  # loopback only: beside the network tests (-n)

K = 32
DTYPE = payload_dtype(K)


def test_payload_record_is_the_wire_layout() -> None:
    assert DTYPE.itemsize == payload_bytes(K)
    record = np.zeros(1, dtype=DTYPE)
    record[0] = (2, 1, 0x1234, 300, K, -5, 0xDEADBEEF, np.arange(K) - 7)
    raw = record.tobytes()
    assert unpack_header(raw) == SwitchMLHeader(2, 1, 0x1234, 300, K, -5, 0xDEADBEEF)
    assert np.frombuffer(raw[SWITCHML_HEADER_BYTES:], dtype=">i4").tolist() == (np.arange(K) - 7).tolist()
    buffer = bytearray(payload_bytes(K))
    pack_header(buffer, 0, SwitchMLHeader(2, 1, 0x1234, 300, K, -5, 0xDEADBEEF))
    assert bytes(buffer[:SWITCHML_HEADER_BYTES]) == raw[:SWITCHML_HEADER_BYTES]


def udp_pair() -> tuple[socket.socket, socket.socket]:
    a = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    b = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    a.bind(("127.0.0.1", 0))
    b.bind(("127.0.0.1", 0))
    a.connect(b.getsockname())
    b.connect(a.getsockname())
    a.setblocking(False)
    b.setblocking(False)
    return a, b


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = udp_pair()
    yield a, b
    a.close()
    b.close()


def test_a_batch_arrives_whole_and_in_order(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    sender, receiver = BatchSocket(a, DTYPE, 16), BatchSocket(b, DTYPE, 16)
    sender.tx["slot"][:10] = np.arange(10)
    sender.tx["data"][:10] = np.arange(10 * K).reshape(10, K)
    assert sender.send(10) == 0
    assert receiver.receive() == 10
    assert receiver.lengths[:10].tolist() == [DTYPE.itemsize] * 10
    assert receiver.rx["slot"][:10].tolist() == list(range(10))
    np.testing.assert_array_equal(receiver.rx["data"][:10], np.arange(10 * K).reshape(10, K))
    assert receiver.receive() == 0  # drained, and it does not block


def test_receive_takes_at_most_its_capacity(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    sender, receiver = BatchSocket(a, DTYPE, 8), BatchSocket(b, DTYPE, 3)
    assert sender.send(8) == 0
    assert [receiver.receive() for _ in range(4)] == [3, 3, 2, 0]


def test_foreign_sizes_show_in_lengths(pair: tuple[socket.socket, socket.socket]) -> None:
    """A datagram of another size is never passed off as a record: short ones and long ones
    (even beyond the slack, which the kernel truncates) report a length != itemsize."""
    a, b = pair
    receiver = BatchSocket(b, DTYPE, 4)
    for size in (5, DTYPE.itemsize + 1, DTYPE.itemsize + RECEIVE_SLACK_BYTES + 100):
        a.send(b"\x01" * size)
    assert receiver.receive() == 3
    assert receiver.lengths[0] == 5
    assert receiver.lengths[1] == DTYPE.itemsize + 1
    assert receiver.lengths[2] == DTYPE.itemsize + RECEIVE_SLACK_BYTES


def test_an_icmp_error_refuses_a_later_send_which_is_tried_again() -> None:
    """Sending to a closed port: each datagram's ICMP error (port unreachable) refuses the
    next send, which is counted (ECONNREFUSED) and tried again, so every datagram leaves; a
    receive consumes the last error too."""
    a, b = udp_pair()
    b.close()
    try:
        sender = BatchSocket(a, DTYPE, 4)
        assert sum(sender.send(4) for _ in range(3)) == 0
        assert 1 <= sender.refusals[errno.ECONNREFUSED] < 12 and set(sender.refusals) == {errno.ECONNREFUSED}
        assert sender.receive() == 0
    finally:
        a.close()


def test_blocking_sockets_are_refused() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        with pytest.raises(ValueError, match="non-blocking"):
            BatchSocket(s, DTYPE, 4)
    finally:
        s.close()
