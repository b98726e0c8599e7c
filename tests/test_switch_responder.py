"""Every switch target answers ARP and ping for its own address (SwitchMLIngress step 1b),
and forwards every other ARP and ICMP frame as ordinary traffic.

Frames are injected from the hosts' namespaces (conftest.py's test bed, the switch
programmed with protocol/params.py's SWITCH_MAC / SWITCH_IPV4 as its address); the last
case lets a host's own kernel resolve the switch by ARP and ping it.
"""

from __future__ import annotations

import subprocess

import pytest
from scapy.layers.inet import ICMP, IP
from scapy.layers.l2 import ARP, Ether
from scapy.packet import Packet, Raw

from protocol import params
from protocol.switchml import params as switchml_params
from protocol.packet import IPV4_OFFSET, ipv4_checksum
from switches.embedded.switchml.responder import echo_reply_checksum
from tests.conftest import N_HOSTS, ON_THE_BENCH, SwitchUnderTest

pytestmark = [pytest.mark.netns, ON_THE_BENCH]  # a standalone test bed: the embedded and bmv2 cases run beside the network tests (-n)

BROADCAST = "ff:ff:ff:ff:ff:ff"
NOBODY = "10.0.0.200"
"""An address of the hosts' subnet that no host and not the switch has."""
PING_PAYLOAD = bytes(range(48))


def arp_request(switch: SwitchUnderTest, index: int, target: str, op: int = 1) -> Ether:
    host = switch.testbed.hosts[index]
    return Ether(src=host.mac, dst=BROADCAST) / ARP(op=op, hwsrc=host.mac, psrc=host.ipv4, pdst=target)


def echo_request(switch: SwitchUnderTest, index: int, dst: str, icmp_type: int = 8, **ip_fields: int) -> Ether:
    host = switch.testbed.hosts[index]
    return (Ether(src=host.mac, dst=params.SWITCH_MAC) / IP(src=host.ipv4, dst=dst, **ip_fields)
            / ICMP(type=icmp_type, id=0x1234, seq=7) / Raw(PING_PAYLOAD))


def only_frame(switch: SwitchUnderTest, index: int) -> Packet:
    """The one frame the switch sent back, which must reach host ``index`` alone."""
    received = switch.ports.receive(1)
    assert received.total() == 1, {i: [f.summary() for f in frames] for i, frames in received.frames.items()}
    assert len(received.frames[index]) == 1
    return received.frames[index][0]


def events(switch: SwitchUnderTest) -> dict[str, int]:
    """The ingress events that happened (the one-per-packet ones), and EGV_SENT."""
    counts = switch.counters()
    return {name: counts[name] for name in (*switchml_params.INGRESS_EVENTS, "EGV_SENT") if counts[name]}


def test_arp_request_for_the_switch_is_answered_out_of_its_port(switch: SwitchUnderTest) -> None:
    host = switch.testbed.hosts[0]
    switch.ports.send(0, bytes(arp_request(switch, 0, params.SWITCH_IPV4)))
    reply = only_frame(switch, 0)
    assert (reply.dst, reply.src, reply.type) == (host.mac, params.SWITCH_MAC, 0x0806)
    arp = reply[ARP]
    assert (arp.hwtype, arp.ptype, arp.hwlen, arp.plen, arp.op) == (1, 0x0800, 6, 4, 2)
    assert (arp.hwsrc, arp.psrc, arp.hwdst, arp.pdst) == (params.SWITCH_MAC, params.SWITCH_IPV4, host.mac, host.ipv4)
    assert events(switch) == {"EV_ARP_REPLY": 1, "EGV_SENT": 1}


def test_echo_request_to_the_switch_is_answered_with_its_checksums_right(switch: SwitchUnderTest) -> None:
    host = switch.testbed.hosts[1]
    switch.ports.send(1, bytes(echo_request(switch, 1, params.SWITCH_IPV4, ttl=17)))
    reply = only_frame(switch, 1)
    assert (reply.dst, reply.src) == (host.mac, params.SWITCH_MAC)
    assert (reply[IP].src, reply[IP].dst, reply[IP].ttl) == (params.SWITCH_IPV4, host.ipv4, 17)
    assert reply[IP].chksum == ipv4_checksum(bytes(reply), IPV4_OFFSET)
    icmp = reply[ICMP]
    assert (icmp.type, icmp.code, icmp.id, icmp.seq, bytes(icmp.payload)) == (0, 0, 0x1234, 7, PING_PAYLOAD)
    recomputed = ICMP(bytes(icmp))
    recomputed.chksum = None
    assert icmp.chksum == ICMP(bytes(recomputed)).chksum, "ICMP checksum updated for the type's change"
    assert events(switch) == {"EV_ICMP_ECHO_REPLY": 1, "EGV_SENT": 1}


@pytest.mark.parametrize("checksum", [0x0000, 0xF7FF, 0xF800, 0xFFFF])
def test_echo_reply_checksum_edge_values(switch: SwitchUnderTest, checksum: int) -> None:
    """Where the incremental update (RFC 1624 eqn. 3) carries or reaches 0/0xFFFF: every
    target computes the same checksum, the one the embedded responder's formula gives."""
    frame = echo_request(switch, 0, params.SWITCH_IPV4)
    frame[ICMP].chksum = checksum
    switch.ports.send(0, bytes(frame))
    assert only_frame(switch, 0)[ICMP].chksum == echo_reply_checksum(checksum)


def test_echo_reply_checksum_is_rfc_1624() -> None:
    """The formula itself, against the checksum computed afresh over the reply."""
    for payload in (b"", b"\x00\x01", bytes(range(255)), b"\xff" * 6):
        request = ICMP(bytes(ICMP(type=8, id=1, seq=2) / Raw(payload)))
        reply = ICMP(type=0, id=1, seq=2) / Raw(payload)
        assert echo_reply_checksum(request.chksum) == ICMP(bytes(reply)).chksum


@pytest.mark.parametrize("case", ["arp for nobody", "arp reply to the switch's address", "echo to nobody", "echo reply",
                                  "fragment", "echo request with code 1"])
def test_other_arp_and_icmp_is_forwarded_as_before(switch: SwitchUnderTest, case: str) -> None:
    frames = {
        "arp for nobody": arp_request(switch, 0, NOBODY),
        "arp reply to the switch's address": arp_request(switch, 0, params.SWITCH_IPV4, op=2),
        "echo to nobody": echo_request(switch, 0, NOBODY),
        "echo reply": echo_request(switch, 0, params.SWITCH_IPV4, icmp_type=0),
        "fragment": echo_request(switch, 0, params.SWITCH_IPV4, flags=1),
        "echo request with code 1": echo_request(switch, 0, params.SWITCH_IPV4),
    }
    frame = frames[case]
    if case == "echo request with code 1":
        frame[ICMP].code = 1
    switch.ports.send(0, bytes(frame))
    received = switch.ports.receive(N_HOSTS - 1)
    assert [len(received.frames[i]) for i in range(N_HOSTS)] == [0] + [1] * (N_HOSTS - 1), "flooded, unanswered"
    assert bytes(received.frames[1][0])[: len(frame)] == bytes(Ether(bytes(frame)))
    assert events(switch) == {"EV_FORWARDED": 1, "EGV_SENT": N_HOSTS - 1}


def test_a_hosts_kernel_resolves_and_pings_the_switch(switch: SwitchUnderTest) -> None:
    """No static ARP entry: the host's kernel asks for the switch, then gets three echoes."""
    host = switch.testbed.hosts[2]
    subprocess.run(["ip", "-n", host.netns, "neigh", "flush", "dev", host.ifname], check=True)
    ping = host.popen(["ping", "-c", "3", "-i", "0.2", "-W", "2", params.SWITCH_IPV4], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = ping.communicate(timeout=30)
    assert ping.returncode == 0, output
    assert "3 received" in output, output
    counts = switch.counters()
    assert counts["EV_ICMP_ECHO_REPLY"] == 3
    assert counts["EV_ARP_REPLY"] >= 1
