"""The same random frames into the embedded switch and into bmv2 or the eBPF switch: the same
frames must come out.

Every target implements one program (docs/dataplane.md), so for any input they must send
the same bytes out of the same ports in the same order and count the same events. This
test generates a seeded random sequence of frames covering every path of the program:
updates of the workers of two jobs sharing the switch (conftest.py: each job its own slot
range) into several slots and both shadow sets (new contributions, completions, duplicates,
retransmissions before and after completion, stale ones), wrong job ids (another job's
too), unknown and spoofed senders (workers of one job posing as the other's), slots beyond
the sender's job's pool, hierarchical aggregation (the switch is a leaf of OTHER_JOB: its
local sums go up to host 2, which sends results from above, current, old, repeated or
from the wrong port), malformed updates (truncated, wrong k, wrong num_elements, wrong
udp.length, bad slot, bad shadow set, bad msg_type), updates with a
trailer or a wrong IPv4 checksum, ARP and ICMP echo requests for the switch's own address
and their near misses (other addresses, replies, other ICMP, fragments, cut frames), and
ordinary traffic: IPv4 with right and wrong header
checksums, with options, with odd version or ihl fields, cut inside its headers, with
trailing bytes, other etherTypes, 802.1Q, 802.1ad and double-tagged frames (tagged
updates too); and some of those through the drop simulator at probability 1, on ingress or on
egress (the one deterministic setting besides 0, and each target's own random draws could not
be compared), which is off again before the step's probes. It runs the sequence on the embedded switch (the reference) and on the
compared target in turn, on the same namespaces, from a fresh switch, and compares step by
step; once on a switch that drops unknown senders' updates and once on one that forwards
them as ordinary traffic (pass-through).

Lock-step makes the order deterministic on bmv2, whose ports, ingress and egress are
separate threads. For each step: send the frame, wait until the ingress event counter
moved (every frame that reaches ingress counts exactly one event), then send two probe
frames (broadcast, flooded to every port but their own) from two hosts. bmv2 keeps the
order of packets per egress port, so everything a port sends before its first probe is
the step's output. Once every probe has arrived, the counters are read.

Ordinary frames go to a few source MACs of earlier ordinary frames (unicast to the port
where a target learned them, even back out of the sender's port) or to destinations no
frame comes from (broadcast, multicast, the switch's MAC, unused unicast MACs: flooded).
The embedded and the eBPF switch learn synchronously, bmv2 through a controller that
answers its digests a little later, so after each step the compared run waits until its
l2_table holds as many entries as the embedded switch's did after the same step, and
compares that count too.
"""

from __future__ import annotations

import dataclasses
import select
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence, TypeVar

import numpy as np
import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import ARP, Ether

from protocol import params
from protocol.switchml import params as switchml_params
from protocol.packet import build_frame, Endpoint, ETH_HEADER_BYTES, IPV4_OFFSET, mac_to_bytes, UDP_OFFSET
from protocol.switchml.packet import encode_payload, frame_bytes, SwitchMLHeader
from protocol.switchml.scapy_layer import SwitchML
from switches.switchml import programming
from switches.control import SwitchControl
from switches.targets import REGISTRY
from tests.conftest import JOB, JOB_HOSTS, JOB_POOL, N_WORKERS, ON_THE_BENCH, OTHER_JOB, TARGET_MARKS, TARGETS, job_programs, require_target
from base.netns import Host, Testbed
from tests.switch_io import SWITCH, SwitchPorts, learned_entries, update_frame, vlan_tagged

pytestmark = [pytest.mark.netns, ON_THE_BENCH]  # a standalone test bed: the embedded and bmv2 cases run beside the network tests (-n)

REFERENCE = "embedded"
"""The model every other target is compared with."""
COMPARED = tuple(name for name in sorted(TARGETS) if name != REFERENCE)
"""Targets compared with it; where one cannot run, ``require_target`` skips (or, in CI,
fails) the comparison: without it there is nothing to compare."""

CASES = {"seed-20261130": (20261130, False, 32), "seed-8-pass-through": (8, True, 32), "seed-20261201-k256": (20261201, False, 256)}
"""(seed of the sequence, whether unknown senders' updates are forwarded as ordinary traffic
instead of dropped, k), each on fresh switches."""
STEPS = 1000
SLOTS = 4
"""Slots the updates use: few, so that completions, duplicates and set changes are frequent."""
OFF_ROUND_SHARE = 0.05
"""Share of updates sent to a random shadow set instead of the slot's current round."""
RECENT_UPDATES = 6
RECENT_REPEAT_SHARE = 0.75
"""Share of repeated updates that copy one of the RECENT_UPDATES last ones."""
PROBE_SENDERS = (2, 0)
"""Hosts the probes come from: every port is reached by at least one of them."""
PROBE_ETHERTYPE = 0x88B5
"""IEEE 802 local experimental etherType: no host kernel answers it."""
PROBE_MIN_BYTES = 60
WAIT_S = 5.0
"""Longest wait for the ingress counter or a probe: far beyond what a healthy switch needs."""
BROADCAST = "ff:ff:ff:ff:ff:ff"
ORDINARY_SOURCES = ("02:00:00:00:bb:01", "02:00:00:00:bb:02", "02:00:00:00:bb:03")
NEVER_SOURCES = ("02:00:00:00:aa:01", "02:00:00:00:aa:02", "01:00:5e:00:00:fb", BROADCAST, params.SWITCH_MAC)
ORDINARY_DESTINATIONS = ORDINARY_SOURCES + NEVER_SOURCES
"""Learned once a frame came from them, or flooded forever."""
FIRST_SEQ = (1 << 32) - 40
"""Sequence number of the first versions: the sequence wraps early on (serial-number order)."""
FOREIGN_NET = "10.0.1."
"""Ordinary traffic's IPv4 destinations: no host's address, so no host kernel answers."""
UDP_LENGTH_OFFSET = UDP_OFFSET + 4
ICMP_OFFSET = UDP_OFFSET
ARP_OPER_OFFSET = ETH_HEADER_BYTES + 6
IPV4_FRAGMENT_OFFSET = IPV4_OFFSET + 6
IPV4_CHECKSUM_OFFSET = IPV4_OFFSET + 10
INT32 = np.iinfo(np.int32)
SEQ_MASK = (1 << 32) - 1
T = TypeVar("T")


NO_LOSS = (0.0, 0.0)
LOSSES = ((1.0, 0.0), (0.0, 1.0))
"""A lossy step's drop probabilities (ingress, egress): certain, so every target drops the same
frames (the draws themselves are each target's own and cannot be compared)."""


@dataclass(frozen=True)
class Step:
    """One frame of the sequence: who sends it, what it is (for the failure message), its bytes,
    and the drop simulator's (ingress, egress) probabilities while it passes."""

    sender: int
    what: str
    frame: bytes
    drops: tuple[float, float] = NO_LOSS


@dataclass(frozen=True)
class Outcome:
    """What a target did with one step: frames per host in arrival order, then its counters
    and how many L2 entries it had learned."""

    frames: tuple[tuple[bytes, ...], ...]
    counters: dict[str, int]
    l2_entries: int
    lossy_copies: int = 0
    """A lossy step's copies egress counted (sent or dropped) before the step's probes."""


UPPER_HOST = 2
"""Host 2 plays the switch above for OTHER_JOB, of which the switch under test is a leaf."""
LEAF = Endpoint("02:53:4d:4c:01:01", "10.0.0.253", switchml_params.UDP_PORT_BASE)
"""The switch's own address as a worker of the switch above."""
WORKERS = [host for hosts in JOB_HOSTS.values() for host in hosts]
"""Hosts that are workers of some job."""
JOB_OF = {host: job for job, hosts in JOB_HOSTS.items() for host in hosts}


class JobRounds:
    """One job's protocol state as its workers would keep it: per slot, the shadow set and
    seq of the current round and who has sent to it."""

    def __init__(self) -> None:
        self.round_set = [0] * SLOTS
        """Per slot, the shadow set of its current round: workers move on to the other set
        once both sent theirs, as the protocol does, so many slots complete."""
        self.round_senders: list[set[int]] = [set() for _ in range(SLOTS)]
        self.round_seq = [(FIRST_SEQ + slot) & SEQ_MASK for slot in range(SLOTS)]
        """Per slot, the seq every worker's update of the current round carries (as workers do)."""
        self.next_seq = FIRST_SEQ + SLOTS
        self.previous: list[tuple[int, int] | None] = [None] * SLOTS
        """Per slot, (shadow set, seq) of the round before the current one: what a leaf sent up."""


class SequenceBuilder:
    """Draws the random steps; every choice comes from one seeded generator."""

    def __init__(self, hosts: list[Host], rng: np.random.Generator, k: int) -> None:
        self.hosts = hosts
        self.rng = rng
        self.k = k
        self.updates: list[Step] = []
        """Well-formed updates sent so far, for duplicates and retransmissions."""
        self.jobs = {job: JobRounds() for job in JOB_HOSTS}

    def pick(self, options: Sequence[T]) -> T:
        return options[int(self.rng.integers(len(options)))]

    def elements(self, k: int | None = None) -> np.ndarray:
        """Random int32 elements: the switch's k of them unless ``k`` says otherwise."""
        return self.rng.integers(INT32.min, INT32.max, size=self.k if k is None else k, endpoint=True, dtype=np.int64).astype(np.int32)

    def update(self, worker: int, **fields: object) -> bytes:
        """An update from host ``worker`` with random header fields and elements, ``fields`` overriding them."""
        header = {
            "slot": int(self.rng.integers(SLOTS)),
            "shadow_set": int(self.rng.integers(2)),
            "elements": self.elements(),
            "job_id": JOB_OF.get(worker, JOB),
            "exponent": int(self.rng.integers(-128, 128)),
            "seq": int(self.rng.integers(1 << 32)),
        }
        header.update(fields)
        return update_frame(self.hosts[worker], **header)

    def next_contribution(self, worker: int) -> dict[str, int]:
        """Slot, set and seq of a worker's next update: mostly its slot's current round, else
        any set with this round's, the previous round's or any seq (stale and odd updates)."""
        rounds = self.jobs[JOB_OF[worker]]
        slot = int(self.rng.integers(SLOTS))
        current = rounds.round_seq[slot]
        if self.rng.random() < OFF_ROUND_SHARE:
            seq = self.pick([current, (current - 1) & SEQ_MASK, int(self.rng.integers(1 << 32))])
            return {"slot": slot, "shadow_set": int(self.rng.integers(2)), "seq": seq}
        shadow_set = rounds.round_set[slot]
        rounds.round_senders[slot].add(worker)
        if len(rounds.round_senders[slot]) == N_WORKERS:
            rounds.previous[slot] = (shadow_set, current)
            rounds.round_set[slot] ^= 1
            rounds.round_senders[slot].clear()
            rounds.round_seq[slot] = rounds.next_seq & SEQ_MASK
            rounds.next_seq += 1
        return {"slot": slot, "shadow_set": shadow_set, "seq": current}

    # -- the kinds of step ---------------------------------------------------------------

    def new_update(self) -> Step:
        worker = self.pick(WORKERS)
        frame = self.update(worker, **self.next_contribution(worker))
        step = Step(worker, f"update from worker {worker}: {describe(frame)}", frame)
        self.updates.append(step)
        return step

    def repeated_update(self) -> Step:
        """A copy of an earlier update: mostly a recent one (a retransmission), else any (stale)."""
        if not self.updates:
            return self.new_update()
        recent = self.rng.random() < RECENT_REPEAT_SHARE
        earlier = self.pick(self.updates[-RECENT_UPDATES:] if recent else self.updates)
        return Step(earlier.sender, f"again: {earlier.what}", earlier.frame)

    def update_with_trailer(self) -> Step:
        worker = self.pick(WORKERS)
        trailer = self.rng.bytes(int(self.rng.integers(1, 33)))
        frame = self.update(worker, **self.next_contribution(worker)) + trailer
        step = Step(worker, f"update from worker {worker} + {len(trailer)} trailing bytes: {describe(frame)}", frame)
        self.updates.append(step)
        return step

    def update_with_wrong_ipv4_checksum(self) -> Step:
        worker = self.pick(WORKERS)
        frame = with_wrong_ipv4_checksum(self.update(worker, **self.next_contribution(worker)))
        step = Step(worker, f"update from worker {worker} with a wrong IPv4 checksum: {describe(frame)}", frame)
        self.updates.append(step)
        return step

    def wrong_job(self) -> Step:
        worker = self.pick(WORKERS)
        others = [job for job in JOB_HOSTS if job != JOB_OF[worker]]
        job = int(self.pick([*others, *others, JOB + 1, 0, 0xFFFF]))
        return Step(worker, f"update from worker {worker} for job {job}", self.update(worker, job_id=job))

    def beyond_pool(self) -> Step:
        """A slot past the sender's job's pool but inside the registers (another job's cells)."""
        worker = self.pick(WORKERS)
        slot = int(self.rng.integers(JOB_POOL, switchml_params.MAX_POOL_SIZE))
        return Step(worker, f"update from worker {worker} to slot {slot}, beyond its job's pool", self.update(worker, slot=slot))

    def result_from_above(self) -> Step:
        """A result of the switch above for OTHER_JOB: mostly for the round its workers just
        finished (the version the leaf sent up), else any set and seq; now and then from a
        worker's port or for the job without an uplink (both refused)."""
        rounds = self.jobs[OTHER_JOB]
        slot = int(self.rng.integers(SLOTS))
        previous = rounds.previous[slot]
        if previous is not None and self.rng.random() < 0.7:
            shadow_set, seq = previous
        else:
            shadow_set, seq = int(self.rng.integers(2)), self.pick([rounds.round_seq[slot], int(self.rng.integers(1 << 32))])
        sender, job = self.pick([(UPPER_HOST, OTHER_JOB)] * 6 + [(0, OTHER_JOB), (UPPER_HOST, JOB)])
        header = SwitchMLHeader(switchml_params.MSG_RESULT, shadow_set, job, slot, self.k, int(self.rng.integers(-128, 128)), seq)
        frame = build_frame(SWITCH, LEAF, encode_payload(header, self.elements()))
        return Step(sender, f"result from above from host {sender}: {describe(frame)}", frame)

    def unknown_sender(self) -> Step:
        sender, as_host = self.pick([(2, 2), (2, 0), (1, 0), (0, 1), (3, 0), (0, 3), (4, 3), (2, 4)])
        frame = update_frame(self.hosts[as_host], int(self.rng.integers(SLOTS)), 0, self.elements(), JOB)
        return Step(sender, f"update with host {as_host}'s addresses from host {sender}'s port", frame)

    def malformed(self) -> Step:
        worker = self.pick(WORKERS)
        variants: dict[str, Callable[[], bytes]] = {
            "truncated": lambda: self.update(worker)[: int(self.rng.integers(ETH_HEADER_BYTES, frame_bytes(self.k)))],
            "k/2 elements": lambda: self.update(worker, elements=self.elements(self.k // 2)),
            "num_elements k-1": lambda: self.update(worker, num_elements=self.k - 1),
            "msg_type result": lambda: self.update(worker, msg_type=switchml_params.MSG_RESULT),
            "msg_type 7": lambda: self.update(worker, msg_type=7),
            "shadow_set 2": lambda: self.update(worker, shadow_set=2),
            "slot out of range": lambda: self.update(worker, slot=int(self.rng.integers(switchml_params.MAX_POOL_SIZE, 1 << 16))),
            "udp.length + 4": lambda: with_udp_length_delta(self.update(worker), 4),
            "udp.length - 4": lambda: with_udp_length_delta(self.update(worker), -4),
        }
        name = self.pick(sorted(variants))
        frame = variants[name]()
        return Step(worker, f"malformed update from worker {worker} ({name}, {len(frame)} bytes)", frame)

    def ordinary(self) -> Step:
        sender = int(self.rng.integers(len(self.hosts)))
        src = self.pick(ORDINARY_SOURCES)
        dst = self.pick(ORDINARY_DESTINATIONS)
        ip_src, ip_dst = f"{FOREIGN_NET}{self.rng.integers(1, 255)}", f"{FOREIGN_NET}{self.rng.integers(1, 255)}"
        payload = self.rng.bytes(int(self.rng.integers(0, 64)))
        eth = Ether(src=src, dst=dst)
        ipv4 = build_frame(Endpoint(src, ip_src, 1000), Endpoint(dst, ip_dst, int(self.rng.integers(1 << 16))), payload)
        variants: dict[str, Callable[[], bytes]] = {
            "IPv4/UDP": lambda: ipv4,
            "IPv4/UDP, wrong checksum": lambda: with_wrong_ipv4_checksum(ipv4),
            "IPv4/UDP + trailer": lambda: ipv4 + self.rng.bytes(int(self.rng.integers(1, 40))),
            "IPv4/TCP, wrong checksum": lambda: bytes(eth / IP(src=ip_src, dst=ip_dst, chksum=0x1234) / TCP() / payload),
            "IPv4 with options, wrong checksum": lambda: bytes(eth / IP(src=ip_src, dst=ip_dst, options=b"\x01\x01\x01\x00", chksum=0x1234) / UDP() / payload),
            "IPv4 cut after its header, wrong checksum": lambda: with_wrong_ipv4_checksum(ipv4)[: UDP_OFFSET + 4],
            "IPv4 cut inside its header": lambda: ipv4[: IPV4_OFFSET + int(self.rng.integers(1, 20))],
            "update to the switch with IPv4 options": lambda: bytes(
                eth / IP(src=self.hosts[sender].ipv4, dst=params.SWITCH_IPV4, options=b"\x01\x01\x01\x00") / UDP(dport=switchml_params.UDP_PORT_BASE) / bytes(64)
            ),
            "etherType 0x88B6": lambda: bytes(Ether(src=src, dst=dst, type=0x88B6) / payload),
            "802.1Q-tagged IPv4, wrong checksum": lambda: vlan_tagged(with_wrong_ipv4_checksum(ipv4), self.tci()),
            "802.1ad-tagged IPv4": lambda: vlan_tagged(ipv4, self.tci(), 0x88A8),
            "802.1ad + 802.1Q double-tagged IPv4": lambda: vlan_tagged(vlan_tagged(ipv4, self.tci()), self.tci(), 0x88A8),
            "IPv4 version field 5, wrong checksum": lambda: with_version_ihl(with_wrong_ipv4_checksum(ipv4), 0x55),
            "IPv4 ihl 4, wrong checksum": lambda: with_version_ihl(with_wrong_ipv4_checksum(ipv4), 0x44),
            "802.1Q-tagged update": lambda: vlan_tagged(self.update(sender), self.tci()),
        }
        name = self.pick(sorted(variants))
        frame = variants[name]()
        return Step(sender, f"ordinary from host {sender}, {name}: {describe(frame)}", frame)

    def own_address(self) -> Step:
        """ARP and ICMP echo for the switch's own address (answered: step 1b) and their near
        misses (forwarded): other addresses (none a host's, so no kernel answers), replies,
        other hardware, ICMP types and codes, fragments, cut or padded frames. The answers
        go back to the sender."""
        sender = int(self.rng.integers(len(self.hosts)))
        host = self.hosts[sender]
        target = self.pick((params.SWITCH_IPV4, params.SWITCH_IPV4, f"{FOREIGN_NET}{self.rng.integers(1, 255)}"))
        padding = self.rng.bytes(int(self.rng.integers(0, 24)))
        eth = Ether(src=host.mac, dst=self.pick((BROADCAST, params.SWITCH_MAC)))
        arp = bytes(eth / ARP(hwsrc=host.mac, psrc=host.ipv4, pdst=target))
        echo = bytes(eth / IP(src=host.ipv4, dst=target, ttl=int(self.rng.integers(1, 256)))
                     / ICMP(id=int(self.rng.integers(1 << 16)), seq=int(self.rng.integers(1 << 16)))
                     / self.rng.bytes(int(self.rng.integers(0, 64))))
        variants: dict[str, Callable[[], bytes]] = {
            "ARP request": lambda: arp + padding,
            "ARP reply": lambda: with_bytes(arp, ARP_OPER_OFFSET, b"\0\2"),
            "ARP request, hardware type 6": lambda: with_bytes(arp, ETH_HEADER_BYTES, b"\0\6"),
            "ARP request cut": lambda: arp[: ETH_HEADER_BYTES + int(self.rng.integers(0, 28))],
            "ICMP echo request": lambda: echo + padding,
            "ICMP echo request, wrong IPv4 checksum": lambda: with_wrong_ipv4_checksum(echo),
            "ICMP echo request, code 3": lambda: with_bytes(echo, ICMP_OFFSET + 1, b"\3"),
            "ICMP echo request, more fragments": lambda: with_bytes(echo, IPV4_FRAGMENT_OFFSET, b"\x20\0"),
            "ICMP echo request, fragment offset 1": lambda: with_bytes(echo, IPV4_FRAGMENT_OFFSET, b"\0\1"),
            "ICMP echo request cut in ICMP": lambda: echo[: ICMP_OFFSET + int(self.rng.integers(0, 4))],
            "ICMP echo reply": lambda: with_bytes(echo, ICMP_OFFSET, b"\0"),
            "ICMP type 13": lambda: with_bytes(echo, ICMP_OFFSET, b"\x0d"),
        }
        name = self.pick(sorted(variants))
        frame = variants[name]()
        return Step(sender, f"from host {sender} for {target}, {name}: {describe(frame)}", frame)

    def tci(self) -> int:
        return int(self.rng.integers(1 << 16))

    def lossy(self) -> Step:
        """An update, a result from above, ordinary traffic or a request to the switch's own
        address through a drop simulator that drops every frame on arrival, or every copy on
        the way out (the answer to a request too)."""
        step = self.pick([self.new_update, self.new_update, self.result_from_above, self.ordinary, self.own_address])()
        drops = self.pick(LOSSES)
        return dataclasses.replace(step, what=f"{step.what}, drop probabilities {drops}", drops=drops)

    def steps(self, count: int) -> list[Step]:
        """``count`` steps, each of a kind drawn with these weights."""
        kinds: list[tuple[Callable[[], Step], int]] = [
            (self.new_update, 30),
            (self.repeated_update, 14),
            (self.update_with_trailer, 5),
            (self.update_with_wrong_ipv4_checksum, 3),
            (self.wrong_job, 4),
            (self.beyond_pool, 3),
            (self.result_from_above, 6),
            (self.unknown_sender, 4),
            (self.malformed, 14),
            (self.ordinary, 26),
            (self.own_address, 6),
            (self.lossy, 5),
        ]
        weights = np.array([weight for _, weight in kinds], dtype=float)
        return [kinds[int(self.rng.choice(len(kinds), p=weights / weights.sum()))][0]() for _ in range(count)]


def with_bytes(frame: bytes, offset: int, value: bytes) -> bytes:
    """``frame`` with ``value`` written at ``offset`` (checksums left as they were)."""
    return frame[:offset] + value + frame[offset + len(value):]


def with_udp_length_delta(frame: bytes, delta: int) -> bytes:
    (length,) = struct.unpack_from("!H", frame, UDP_LENGTH_OFFSET)
    out = bytearray(frame)
    struct.pack_into("!H", out, UDP_LENGTH_OFFSET, length + delta)
    return bytes(out)


def with_version_ihl(frame: bytes, version_ihl: int) -> bytes:
    """The IPv4 header's first byte replaced: the checksum rule looks at ihl only."""
    return frame[:IPV4_OFFSET] + bytes([version_ihl]) + frame[IPV4_OFFSET + 1 :]


def with_wrong_ipv4_checksum(frame: bytes) -> bytes:
    out = bytearray(frame)
    out[IPV4_CHECKSUM_OFFSET] ^= 0x5A
    return bytes(out)


def describe(frame: bytes) -> str:
    """A frame in one line, for failure messages: scapy's summary plus the SwitchML fields."""
    packet = Ether(frame)
    if SwitchML in packet:
        sml = packet[SwitchML]
        return (
            f"{len(frame)} B {packet.summary()} type={sml.msg_type} job={sml.job_id} slot={sml.slot} "
            f"set={sml.shadow_set} seq={sml.seq} exp={sml.exponent} elements[0]={sml.elements[0] if sml.elements else None}"
        )
    return f"{len(frame)} B {packet.summary()}"


def probe_frame(sender: int, step: int) -> bytes:
    """Broadcast marker from host ``sender`` after step ``step``: flooded to every other port."""
    header = mac_to_bytes(BROADCAST) + mac_to_bytes(f"02:00:00:00:fe:{sender + 1:02x}") + struct.pack("!H", PROBE_ETHERTYPE)
    return (header + struct.pack("!I", step)).ljust(PROBE_MIN_BYTES, b"\0")


def ingress_events(counters: dict[str, int]) -> int:
    return sum(counters[name] for name in switchml_params.INGRESS_EVENTS)


def egress_events(counters: dict[str, int]) -> int:
    """Copies egress counted, sent or dropped by the drop simulator."""
    return counters["EGV_SENT"] + counters["EGV_DROP_SIM_EGRESS"]


def wait_for_egress(control: SwitchControl, copies: int) -> int:
    """Until egress counted ``copies`` in all, or WAIT_S: bmv2's egress runs after its ingress
    counted the frame. A target that makes fewer copies is left to the comparison. Returns the
    count it saw last."""
    deadline = time.monotonic() + WAIT_S
    while (seen := egress_events(programming.read_event_counters(control))) < copies and time.monotonic() < deadline:
        time.sleep(0.001)
    return seen


def wait_for_ingress(control: SwitchControl, events_before: int, target: str, step: int) -> None:
    """Until the ingress event counter counted the step's frame."""
    deadline = time.monotonic() + WAIT_S
    while ingress_events(programming.read_event_counters(control)) <= events_before:
        assert time.monotonic() < deadline, f"{target}, step {step}: the frame never reached ingress (no event counted)"
        time.sleep(0.001)


def collect(ports: SwitchPorts, probes: dict[int, bytes], target: str, step: int) -> tuple[tuple[bytes, ...], ...]:
    """Every host's frames until all probes that reach it arrived, without the probes."""
    hosts = range(len(ports.sockets))
    awaited = {h: {frame for sender, frame in probes.items() if sender != h} for h in hosts}
    frames: list[list[bytes]] = [[] for _ in hosts]
    deadline = time.monotonic() + WAIT_S
    while any(awaited.values()):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{target}, step {step}: probes never arrived at hosts {[h for h in hosts if awaited[h]]}"
        ready, _, _ = select.select([ports.sockets[h] for h in hosts if awaited[h]], [], [], remaining)
        for sock in ready:
            h = ports.sockets.index(sock)
            while time.monotonic() < deadline and (frame := ports.receive_frame(h)) is not None:
                if frame in awaited[h]:
                    awaited[h].discard(frame)
                else:
                    frames[h].append(frame)
    return tuple(tuple(f) for f in frames)


def run_sequence(control: SwitchControl, ports: SwitchPorts, steps: list[Step], target: str, reference: list[Outcome] | None) -> list[Outcome]:
    """Every step in lock-step; with a reference run, each step waits for its learning state,
    and a lossy one for its egress to count as many copies of the step as the reference's
    did, before the drop simulator is turned off and the probes are sent."""
    outcomes: list[Outcome] = []
    counters = programming.read_event_counters(control)
    events = ingress_events(counters)
    for index, step in enumerate(steps):
        copies = 0
        if step.drops != NO_LOSS:
            programming.set_drop_probability(control, *step.drops)
        ports.send(step.sender, step.frame)
        wait_for_ingress(control, events, target, index)
        if step.drops != NO_LOSS:  # off again before the probes, once egress is done with the frame
            before = egress_events(counters)
            copies = wait_for_egress(control, before + (0 if reference is None else reference[index].lossy_copies)) - before
            programming.set_drop_probability(control, *NO_LOSS)
        probes = {sender: probe_frame(sender, index) for sender in PROBE_SENDERS}
        for sender, probe in probes.items():
            ports.send(sender, probe)
        frames = collect(ports, probes, target, index)
        counters = programming.read_event_counters(control)
        events = ingress_events(counters)
        l2_entries = learned_entries(control, None if reference is None else reference[index].l2_entries)
        outcomes.append(Outcome(frames, counters, l2_entries, copies))
    return outcomes


def run_on_target(
    name: str, testbed: Testbed, steps: list[Step], log_dir: Path, pass_through: bool, k: int, reference: list[Outcome] | None = None
) -> list[Outcome]:
    """A fresh switch of target ``name`` at k, programmed like the packet tests' (conftest.py);
    ``pass_through`` forwards updates of senders not in worker_table as ordinary traffic."""
    with TARGETS[name](testbed, log_dir / name, k) as control:
        programming.program_forwarding(control, list(testbed.switch_ports), {})
        programming.program_jobs(control, leaf_of_other_job(testbed))
        programming.program_switch_address(control, params.SWITCH_MAC, params.SWITCH_IPV4)
        if pass_through:
            programming.program_pass_through(control)
        ports = SwitchPorts(testbed)
        try:
            return run_sequence(control, ports, steps, name, reference)
        finally:
            ports.close()


def leaf_of_other_job(testbed: Testbed) -> list[programming.JobProgram]:
    """conftest's two jobs, with the switch a leaf of OTHER_JOB below host 2."""
    uplink = programming.Uplink(testbed.hosts[UPPER_HOST].switch_port, LEAF.mac, LEAF.ipv4, params.SWITCH_MAC, params.SWITCH_IPV4)
    return [dataclasses.replace(job, uplink=uplink) if job.job_id == OTHER_JOB else job for job in job_programs(testbed)]


def first_differing_byte(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def first_difference(seed: int, steps: list[Step], runs: dict[str, list[Outcome]]) -> str | None:
    """The first step at which the targets differ, explained; None if they never do."""
    (name_a, outcomes_a), (name_b, outcomes_b) = runs.items()
    for index, (a, b) in enumerate(zip(outcomes_a, outcomes_b, strict=True)):
        if a == b:
            continue
        lines = [f"seed {seed}, step {index} of {len(steps)}: host {steps[index].sender} sent {steps[index].what}"]
        lines += [f"  {describe(steps[index].frame)}", f"  bytes {steps[index].frame.hex()}"]
        for host, (frames_a, frames_b) in enumerate(zip(a.frames, b.frames, strict=True)):
            if frames_a != frames_b:
                lines.append(f"host {host} received:")
                for name, frames in ((name_a, frames_a), (name_b, frames_b)):
                    lines.append(f"  {name}: {len(frames)} frame(s)")
                    lines += [f"    {describe(f)}\n      {f.hex()}" for f in frames]
                lines += [
                    f"  frame {i}: first difference at byte {first_differing_byte(fa, fb)}"
                    for i, (fa, fb) in enumerate(zip(frames_a, frames_b))
                    if fa != fb
                ]
        changed = {k: (a.counters.get(k), b.counters.get(k)) for k in sorted(a.counters.keys() | b.counters.keys()) if a.counters.get(k) != b.counters.get(k)}
        if changed:
            lines.append(f"counters after the step ({name_a}, {name_b}): {changed}")
        if a.l2_entries != b.l2_entries:
            lines.append(f"l2_table entries after the step: {name_a} {a.l2_entries}, {name_b} {b.l2_entries}")
        if a.lossy_copies != b.lossy_copies:
            lines.append(f"copies egress counted through the drop simulator: {name_a} {a.lossy_copies}, {name_b} {b.lossy_copies}")
        lines.append("steps before it:")
        lines += [f"  {i}: host {steps[i].sender} sent {steps[i].what}" for i in range(max(0, index - 5), index)]
        return "\n".join(lines)
    return None


@pytest.mark.parametrize(("target", "case"), [
    pytest.param(name, case, marks=TARGET_MARKS[name], id=f"{name}-{case}")
    for name in COMPARED for case in sorted(CASES)
    if REGISTRY[name].builds(CASES[case][2])
])
def test_target_sends_and_counts_what_the_embedded_switch_does(target: str, testbed: Testbed, tmp_path: Path, case: str) -> None:
    require_target(target)
    seed, pass_through, k = CASES[case]
    steps = SequenceBuilder(testbed.hosts, np.random.default_rng(seed), k).steps(STEPS)
    embedded = run_on_target(REFERENCE, testbed, steps, tmp_path, pass_through, k)
    compared = run_on_target(target, testbed, steps, tmp_path, pass_through, k, reference=embedded)
    runs = {"embedded": embedded, target: compared}
    difference = first_difference(seed, steps, runs)
    if difference is not None:
        pytest.fail("the targets differ:\n" + difference, pytrace=False)
    assert embedded[-1].counters["EV_DROP_SIM_INGRESS"] and embedded[-1].counters["EGV_DROP_SIM_EGRESS"], "no lossy step"
