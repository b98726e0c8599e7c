"""The same random frames into the embedded switch and the eBPF switch: the same frames out.

Both implement docs/dataplane.md, so for any input they must send the same bytes out of the
same ports in the same order, count the same events and end with the same registers. A
seeded random sequence covers the program's paths: updates of both workers into a few
slots and both shadow sets (new contributions, completions, duplicates, retransmissions
before and after completion, stale copies of older versions), updates with trailing bytes
or a wrong IPv4 checksum, wrong job ids, unknown and spoofed senders, malformed updates
(truncated, wrong k, wrong num_elements or udp.length, bad slot, set or msg_type), and
ordinary traffic (UDP, with a trailer, with IPv4 options, cut inside its headers, another
etherType). Left out until the targets' rules on main cover them: 802.1Q-tagged frames and
forwarded IPv4 with a wrong header checksum (on main the embedded switch neither restores
a tag the kernel took out nor recomputes a forwarded packet's checksum; the eBPF switch
does what docs/dataplane.md's parser and SwitchMLComputeChecksum say).

Lock step: after each frame, wait until the ingress event counter moved (every frame that
reaches ingress counts exactly one event), then send a broadcast probe from two hosts; a
port's frames before its probe are the step's output. The comparison is written for any
pair of targets in ``PAIRS``.
"""

from __future__ import annotations

import select
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from protocol import params
from protocol.packet import ETH_HEADER_BYTES, IPV4_OFFSET, UDP_OFFSET, Endpoint, build_frame, frame_bytes, mac_to_bytes
from protocol.scapy_layer import SwitchML
from switches import programming
from switches.control import SwitchControl
from tests.conftest import JOB, N_WORKERS, TARGET_MARKS, TARGETS, job_program
from tests.netns_harness import Host, Testbed
from tests.switch_io import SwitchPorts, update_frame

pytestmark = pytest.mark.netns

PAIRS = [("embedded", "ebpf")]
SEED = 20261201
STEPS = 600
SLOTS = 4
"""Slots the updates use: few, so completions, duplicates and set changes are frequent."""
BROADCAST = "ff:ff:ff:ff:ff:ff"
NEVER_SOURCES = ("02:00:00:00:aa:01", "01:00:5e:00:00:fb", BROADCAST, params.SWITCH_MAC)
"""Ordinary traffic's destinations: no frame comes from them, so flooding never depends on learning."""
ORDINARY_SOURCES = ("02:00:00:00:bb:01", "02:00:00:00:bb:02")
FOREIGN_NET = "10.0.1."
"""Ordinary traffic's IPv4 destinations: no host's, so no host kernel answers."""
PROBE_SENDERS = (2, 0)
"""Hosts the probes come from: every port is reached by at least one of them."""
PROBE_ETHERTYPE = 0x88B5
PROBE_MIN_BYTES = 60
WAIT_S = 5.0
MAX_FRAME = 65536
UDP_LENGTH_OFFSET = UDP_OFFSET + 4
IPV4_CHECKSUM_OFFSET = IPV4_OFFSET + 10
COMPARED_REGISTERS = (*programming.aggregation_registers(),)
INT32 = np.iinfo(np.int32)
T = TypeVar("T")


@dataclass(frozen=True)
class Step:
    sender: int
    what: str
    frame: bytes


@dataclass(frozen=True)
class Outcome:
    """Frames per host in arrival order, then the counters."""

    frames: tuple[tuple[bytes, ...], ...]
    counters: dict[str, int]


class SequenceBuilder:
    """The random steps; every choice comes from one seeded generator."""

    def __init__(self, hosts: list[Host], rng: np.random.Generator) -> None:
        self.hosts = hosts
        self.rng = rng
        self.sent: list[Step] = []
        """Well-formed updates so far, for duplicates and (late) retransmissions."""
        self.version = [0] * SLOTS
        """Per slot, its current version: workers contribute with set = version % 2 and the
        version's seq, and move on once both have, as the protocol does."""
        self.contributors: list[set[int]] = [set() for _ in range(SLOTS)]

    def pick(self, options: Sequence[T]) -> T:
        return options[int(self.rng.integers(len(options)))]

    def elements(self, k: int = params.K) -> np.ndarray:
        return self.rng.integers(INT32.min, INT32.max, size=k, endpoint=True, dtype=np.int64).astype(np.int32)

    def update(self, worker: int, **fields: object) -> bytes:
        header = {"slot": 0, "shadow_set": 0, "elements": self.elements(), "job_id": JOB, "exponent": int(self.rng.integers(-128, 128)), "seq": 0}
        header.update(fields)
        return update_frame(self.hosts[worker], **header)

    def contribution(self, worker: int) -> dict[str, int]:
        """Slot, set and seq of a worker's next update to the slot's current version."""
        slot = int(self.rng.integers(SLOTS))
        version = self.version[slot]
        self.contributors[slot].add(worker)
        if len(self.contributors[slot]) == N_WORKERS:
            self.version[slot] += 1
            self.contributors[slot].clear()
        return {"slot": slot, "shadow_set": version % 2, "seq": version * SLOTS + slot + 1}

    def new_update(self, trailer: bytes = b"", wrong_checksum: bool = False) -> Step:
        worker = int(self.rng.integers(N_WORKERS))
        frame = self.update(worker, **self.contribution(worker)) + trailer
        if wrong_checksum:
            frame = with_wrong_ipv4_checksum(frame)
        step = Step(worker, f"update from worker {worker} (+{len(trailer)} B, bad csum {wrong_checksum}): {describe(frame)}", frame)
        self.sent.append(step)
        return step

    def repeated_update(self) -> Step:
        """A duplicate or a retransmission of any earlier update: a late one is stale."""
        if not self.sent:
            return self.new_update()
        earlier = self.pick(self.sent)
        return Step(earlier.sender, f"again: {earlier.what}", earlier.frame)

    def update_with_trailer(self) -> Step:
        return self.new_update(trailer=self.rng.bytes(int(self.rng.integers(1, 33))))

    def update_with_wrong_ipv4_checksum(self) -> Step:
        return self.new_update(wrong_checksum=True)

    def wrong_job(self) -> Step:
        worker = int(self.rng.integers(N_WORKERS))
        job = int(self.pick([JOB + 1, 0, 0xFFFF]))
        return Step(worker, f"update from worker {worker} for job {job}", self.update(worker, job_id=job, slot=int(self.rng.integers(SLOTS))))

    def unknown_sender(self) -> Step:
        sender, as_host = self.pick([(2, 2), (2, 0), (1, 0), (0, 1)])
        frame = update_frame(self.hosts[as_host], int(self.rng.integers(SLOTS)), 0, self.elements(), JOB)
        return Step(sender, f"update with host {as_host}'s addresses from host {sender}'s port", frame)

    def malformed(self) -> Step:
        worker = int(self.rng.integers(N_WORKERS))
        variants: dict[str, Callable[[], bytes]] = {
            "truncated": lambda: self.update(worker)[: int(self.rng.integers(ETH_HEADER_BYTES, frame_bytes(params.K)))],
            "k/2 elements": lambda: self.update(worker, elements=self.elements(params.K // 2)),
            "num_elements k-1": lambda: self.update(worker, num_elements=params.K - 1),
            "msg_type result": lambda: self.update(worker, msg_type=params.MSG_RESULT),
            "shadow_set 2": lambda: self.update(worker, shadow_set=2),
            "slot out of range": lambda: self.update(worker, slot=int(self.rng.integers(params.MAX_POOL_SIZE, 1 << 16))),
            "udp.length + 4": lambda: with_udp_length_delta(self.update(worker), 4),
        }
        name = self.pick(sorted(variants))
        frame = variants[name]()
        return Step(worker, f"malformed update from worker {worker} ({name}, {len(frame)} B)", frame)

    def ordinary(self) -> Step:
        sender = int(self.rng.integers(len(self.hosts)))
        src, dst = self.pick(ORDINARY_SOURCES), self.pick(NEVER_SOURCES)
        ip_src, ip_dst = f"{FOREIGN_NET}{self.rng.integers(1, 255)}", f"{FOREIGN_NET}{self.rng.integers(1, 255)}"
        payload = self.rng.bytes(int(self.rng.integers(0, 64)))
        udp = build_frame(Endpoint(src, ip_src, 1000), Endpoint(dst, ip_dst, int(self.rng.integers(1 << 16))), payload)
        variants: dict[str, Callable[[], bytes]] = {
            "IPv4/UDP": lambda: udp,
            "IPv4/UDP + trailer": lambda: udp + self.rng.bytes(int(self.rng.integers(1, 40))),
            "IPv4 with options": lambda: bytes(Ether(src=src, dst=dst) / IP(src=ip_src, dst=ip_dst, options=b"\x01\x01\x01\x00") / UDP() / payload),
            "IPv4 cut inside its header": lambda: udp[: IPV4_OFFSET + int(self.rng.integers(1, 20))],
            "etherType 0x88B6": lambda: bytes(Ether(src=src, dst=dst, type=0x88B6) / payload),
        }
        name = self.pick(sorted(variants))
        frame = variants[name]()
        return Step(sender, f"ordinary from host {sender}, {name}: {describe(frame)}", frame)

    def steps(self, count: int) -> list[Step]:
        kinds: list[tuple[Callable[[], Step], int]] = [
            (self.new_update, 34),
            (self.repeated_update, 16),
            (self.update_with_trailer, 5),
            (self.update_with_wrong_ipv4_checksum, 3),
            (self.wrong_job, 4),
            (self.unknown_sender, 4),
            (self.malformed, 14),
            (self.ordinary, 20),
        ]
        weights = np.array([weight for _, weight in kinds], dtype=float)
        return [kinds[int(self.rng.choice(len(kinds), p=weights / weights.sum()))][0]() for _ in range(count)]


def with_udp_length_delta(frame: bytes, delta: int) -> bytes:
    out = bytearray(frame)
    (length,) = struct.unpack_from("!H", out, UDP_LENGTH_OFFSET)
    struct.pack_into("!H", out, UDP_LENGTH_OFFSET, length + delta)
    return bytes(out)


def with_wrong_ipv4_checksum(frame: bytes) -> bytes:
    out = bytearray(frame)
    out[IPV4_CHECKSUM_OFFSET] ^= 0x5A
    return bytes(out)


def describe(frame: bytes) -> str:
    packet = Ether(frame)
    if SwitchML in packet:
        sml = packet[SwitchML]
        return f"{len(frame)} B type={sml.msg_type} job={sml.job_id} slot={sml.slot} set={sml.shadow_set} seq={sml.seq} exp={sml.exponent}"
    return f"{len(frame)} B {packet.summary()}"


def probe_frame(sender: int, step: int) -> bytes:
    """Broadcast marker from host ``sender`` after step ``step``: flooded to every other port."""
    header = mac_to_bytes(BROADCAST) + mac_to_bytes(f"02:00:00:00:fe:{sender + 1:02x}") + struct.pack("!H", PROBE_ETHERTYPE)
    return (header + struct.pack("!I", step)).ljust(PROBE_MIN_BYTES, b"\0")


def ingress_events(control: SwitchControl) -> int:
    counters = programming.read_event_counters(control)
    return sum(counters[name] for name in params.INGRESS_EVENTS)


def wait_for_ingress(control: SwitchControl, events_before: int, where: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while ingress_events(control) <= events_before:
        assert time.monotonic() < deadline, f"{where}: the frame never reached ingress (no event counted)"
        time.sleep(0.0005)


def receive_queued(sock: socket.socket) -> bytes | None:
    try:
        return sock.recv(MAX_FRAME, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return None


def collect(ports: SwitchPorts, probes: dict[int, bytes], where: str) -> tuple[tuple[bytes, ...], ...]:
    """Every host's frames until the probes that reach it arrived, without the probes."""
    hosts = range(len(ports.sockets))
    awaited = {h: {frame for sender, frame in probes.items() if sender != h} for h in hosts}
    frames: list[list[bytes]] = [[] for _ in hosts]
    deadline = time.monotonic() + WAIT_S
    while any(awaited.values()):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{where}: probes never arrived at hosts {[h for h in hosts if awaited[h]]}"
        ready, _, _ = select.select([ports.sockets[h] for h in hosts if awaited[h]], [], [], remaining)
        for sock in ready:
            h = ports.sockets.index(sock)
            while (frame := receive_queued(sock)) is not None:
                if frame in awaited[h]:
                    awaited[h].discard(frame)
                else:
                    frames[h].append(frame)
    return tuple(tuple(f) for f in frames)


def run_on_target(name: str, testbed: Testbed, steps: list[Step], log_dir: Path) -> tuple[list[Outcome], dict[str, list[int]]]:
    """A fresh switch of target ``name``, programmed like the packet tests': outcome per step
    and the aggregation registers at the end."""
    with TARGETS[name](testbed, log_dir / name) as control:
        programming.program_forwarding(control, list(testbed.switch_ports), {})
        programming.program_aggregation(control, job_program(testbed))
        ports = SwitchPorts(testbed)
        try:
            outcomes = []
            events = ingress_events(control)
            for index, step in enumerate(steps):
                where = f"{name}, step {index}"
                ports.send(step.sender, step.frame)
                wait_for_ingress(control, events, where)
                probes = {sender: probe_frame(sender, index) for sender in PROBE_SENDERS}
                for sender, probe in probes.items():
                    ports.send(sender, probe)
                frames = collect(ports, probes, where)
                counters = programming.read_event_counters(control)
                events = sum(counters[event] for event in params.INGRESS_EVENTS)
                outcomes.append(Outcome(frames, counters))
            registers = {register: control.register_read(register) for register in COMPARED_REGISTERS}
            return outcomes, registers
        finally:
            ports.close()


def first_differing_byte(a: bytes, b: bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def first_difference(steps: list[Step], names: tuple[str, str], outcomes: tuple[list[Outcome], list[Outcome]]) -> str | None:
    """The first step at which the targets differ, explained; None if they never do."""
    for index, (a, b) in enumerate(zip(*outcomes, strict=True)):
        if a == b:
            continue
        lines = [f"seed {SEED}, step {index}: host {steps[index].sender} sent {steps[index].what}", f"  bytes {steps[index].frame.hex()}"]
        for host, (frames_a, frames_b) in enumerate(zip(a.frames, b.frames, strict=True)):
            if frames_a != frames_b:
                lines.append(f"host {host} received:")
                for name, frames in zip(names, (frames_a, frames_b)):
                    lines.append(f"  {name}: {len(frames)} frame(s)")
                    lines += [f"    {describe(f)}\n      {f.hex()}" for f in frames]
                lines += [f"  frame {i}: first difference at byte {first_differing_byte(fa, fb)}" for i, (fa, fb) in enumerate(zip(frames_a, frames_b)) if fa != fb]
        changed = {k: (a.counters[k], b.counters[k]) for k in a.counters if a.counters[k] != b.counters[k]}
        if changed:
            lines.append(f"counters after the step {names}: {changed}")
        lines += [f"  step {i}: host {steps[i].sender} sent {steps[i].what}" for i in range(max(0, index - 5), index)]
        return "\n".join(lines)
    return None


def differential_param(pair: tuple[str, str]) -> Any:
    """A pytest.param of a pair, with each target's marks (so ``-m ebpf`` selects it)."""
    return pytest.param(pair, marks=[mark for name in pair for mark in TARGET_MARKS.get(name, [])], id="-vs-".join(pair))


@pytest.mark.parametrize("pair", [differential_param(pair) for pair in PAIRS])
def test_targets_send_and_count_the_same(pair: tuple[str, str], testbed: Testbed, tmp_path: Path) -> None:
    steps = SequenceBuilder(testbed.hosts, np.random.default_rng(SEED)).steps(STEPS)
    (outcomes_a, registers_a), (outcomes_b, registers_b) = (run_on_target(name, testbed, steps, tmp_path) for name in pair)
    difference = first_difference(steps, pair, (outcomes_a, outcomes_b))
    if difference is not None:
        pytest.fail(f"{pair[0]} and {pair[1]} differ:\n{difference}", pytrace=False)
    totals = outcomes_a[-1].counters  # a fresh switch: the sequence's totals
    assert all(totals[name] > 0 for name in params.INGRESS_EVENTS if name != "EV_DROP_SIM_INGRESS"), f"a path never ran: {totals}"
    for register in COMPARED_REGISTERS:
        assert registers_a[register] == registers_b[register], f"{register} differs at the end"
