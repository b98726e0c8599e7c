"""Forged ICMP errors about a worker's UDP flow, as anyone who can reach the worker may send.

An ICMP error quotes the IP header and the first 8 bytes of the datagram it is about; Linux
finds the socket from the quoted addresses and ports and gives it the error's errno
(hosts/mmsg.py, ICMP_ERRNOS). Nothing else is checked for UDP: no sequence number,
no source address. ``inject`` sends one through a raw socket (root); run as a module, it
sends each of ICMP_ERRORS in turn, from wherever it runs (a neighbour host's namespace in
the Mininet test).

One kind changes more than the socket: "fragmentation needed" (3/4) also lowers the path MTU
the kernel caches for the quoted destination for ten minutes. The tests therefore quote a
switch address of their own (SWITCH_ADDRESS on loopback), whose cached route nothing else
uses, or a namespace that goes away with its run.
"""

from __future__ import annotations

import argparse
import socket
import struct
import time
from typing import NamedTuple

SWITCH_ADDRESS = "127.77.0.1"
"""The loopback address the tests' fake switches listen on: a forged "fragmentation needed"
lowers only this address's cached path MTU, not 127.0.0.1's (which other tests use)."""
QUOTED_PAYLOAD_BYTES = 1065
"""The quoted datagram's UDP payload: a k = 256 SwitchML packet."""
FORGED_MTU = 576


class IcmpError(NamedTuple):
    name: str
    type: int
    code: int
    errno_name: str
    """What a connected UDP socket without IP_RECVERR reports for it (net/ipv4/icmp.c's
    icmp_err_convert, udp.c's __udp4_lib_err)."""


ICMP_ERRORS = (
    IcmpError("network unknown", 3, 6, "ENETUNREACH"),
    IcmpError("host administratively prohibited", 3, 10, "EHOSTUNREACH"),
    IcmpError("protocol unreachable", 3, 2, "ENOPROTOOPT"),
    IcmpError("port unreachable", 3, 3, "ECONNREFUSED"),
    IcmpError("fragmentation needed", 3, 4, "EMSGSIZE"),
    IcmpError("host unknown", 3, 7, "EHOSTDOWN"),
    IcmpError("host isolated", 3, 8, "ENONET"),
    IcmpError("parameter problem", 12, 0, "EPROTO"),
)
"""One ICMP error for each errno a worker's socket takes from one (the hard errors: the soft
ones, e.g. 3/0 network unreachable or 11 time exceeded, reach a socket only with IP_RECVERR)."""


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def forge(error: IcmpError, source: tuple[str, int], destination: tuple[str, int], tcp_seq: int | None = None) -> bytes:
    """The ICMP message (header and quote) about a UDP datagram ``source`` -> ``destination``,
    or a TCP segment with sequence number ``tcp_seq``."""
    protocol = socket.IPPROTO_UDP if tcp_seq is None else socket.IPPROTO_TCP
    quoted_ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + QUOTED_PAYLOAD_BYTES, 0, 0x4000, 64, protocol, 0,
                            socket.inet_aton(source[0]), socket.inet_aton(destination[0]))
    quoted_ip = quoted_ip[:10] + struct.pack("!H", _checksum(quoted_ip)) + quoted_ip[12:]
    if tcp_seq is None:
        quoted = struct.pack("!HHHH", source[1], destination[1], 8 + QUOTED_PAYLOAD_BYTES, 0)
    else:
        quoted = struct.pack("!HHI", source[1], destination[1], tcp_seq)
    rest = struct.pack("!HH", 0, FORGED_MTU) if (error.type, error.code) == (3, 4) else bytes(4)
    message = struct.pack("!BBH", error.type, error.code, 0) + rest + quoted_ip + quoted
    return message[:2] + struct.pack("!H", _checksum(message)) + message[4:]


def inject(error: IcmpError, source: tuple[str, int], destination: tuple[str, int], to: str | None = None,
           tcp_seq: int | None = None) -> None:
    """Send ``error`` about the flow ``source`` -> ``destination`` (UDP, or TCP at ``tcp_seq``)
    to ``to`` (default: the flow's source host)."""
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as raw:
        raw.sendto(forge(error, source, destination, tcp_seq), (to or source[0], 0))


def _endpoint(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def main() -> None:
    parser = argparse.ArgumentParser(description="Send each of ICMP_ERRORS in turn about one UDP flow.")
    parser.add_argument("source", type=_endpoint, help="the flow's source (the worker): IP:PORT")
    parser.add_argument("destination", type=_endpoint, help="the flow's destination (the switch): IP:PORT")
    parser.add_argument("--rounds", type=int, default=1, help="times to send the whole list")
    parser.add_argument("--gap-s", type=float, default=0.02, help="pause after each error")
    args = parser.parse_args()
    for _ in range(args.rounds):
        for error in ICMP_ERRORS:
            inject(error, args.source, args.destination)
            time.sleep(args.gap_s)


if __name__ == "__main__":
    main()
