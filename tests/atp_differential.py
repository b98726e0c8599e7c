"""The differential harness: the same seeded frame sequences into a target's switch and into the
embedded ATPPipeline, the reference, through one driver interface (tests/atp_switch_driver.py).

``assert_sends_and_counts_as_the_reference`` feeds every step to both and asserts the same
frames out of the same ports, byte for byte, and the same counters (packets and bytes) after
every step, the same aggregator registers at the end, and that the sequence took every path of
ATPIngress. ``SequenceBuilder`` writes the steps: two jobs' contributions (fresh, repeated,
resent, ECN-, overflow- and collision-flagged) on a few aggregators, so claims, completions,
collisions, flushes and frees are frequent; PS results (for what the switch holds, and not);
untrusted packets; malformed ones; ordinary traffic (known and unknown destinations, wrong
IPv4 checksums, IPv4 options, 802.1Q tags, other EtherTypes); and contributions, results and
ordinary frames through the drop simulator at probability 1 on ingress or on egress (the one
deterministic setting besides 0). tests/test_atp_bmv2.py and tests/test_atp_ebpf.py run it on
their targets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from atp_network import ps_endpoint, worker_endpoint
from atp_switch_cases import ALL_PORTS, JOB_PORTS, N, POOL, SWITCH_ADDRESS, program
from atp_switch_driver import ATPSwitchDriver, EmbeddedATPSwitch
from protocol.atp import params
from protocol.atp.packet import ATP_OFFSET, FIELD_OFFSETS, ATPHeader, decode_payload, encode_payload
from protocol.packet import IPV4_OFFSET, UDP_OFFSET, Endpoint, build_frame
from switches.atp import programming
from tests.switch_io import vlan_tagged

DIFFERENTIAL_CASES = {"k32-seed-20261206": (32, 20261206, 400), "k256-seed-42": (256, 42, 200)}
"""(k, seed of the sequence, steps), each on fresh switches."""
AGGREGATORS = 4
"""Aggregators the sequences name: few, so that claims, completions, collisions between the
two jobs, flushes and frees are frequent."""
ORDINARY_HOSTS = {f"02:00:00:00:bb:0{port}": port for port in (1, 4, 6)}
"""Destinations of ordinary traffic l2_table knows (the rest are flooded)."""
FOREIGN_NET = "10.0.1."
"""Ordinary traffic's IPv4 addresses: no host's, so no host kernel answers."""
STRANGER = Endpoint("02:00:00:00:99:99", "10.9.9.9", 1)
"""A sender sender_table does not know."""
UDP_LENGTH_OFFSET = UDP_OFFSET + 4
INT32 = np.iinfo(np.int32)
NO_LOSS = (0.0, 0.0)


class Step(NamedTuple):
    """One frame of a sequence: where it enters, its bytes, what it is (for the failure
    message), and the drop simulator's (ingress, egress) probabilities while it passes."""

    port: int
    frame: bytes
    what: str
    drops: tuple[float, float] = NO_LOSS


LOSSES = ((1.0, 0.0), (0.0, 1.0))
"""A lossy step's drop probabilities: certain, so every target drops the same frames (the
draws themselves are each target's own: Python's seeded generator, v1model's random(),
bpf_get_prandom_u32)."""


@dataclass
class Round:
    seq: int
    agtr: int
    senders: set[int] = field(default_factory=set)


class SequenceBuilder:
    """Seeded random steps over every path of ATPIngress and ATPEgress, for two jobs sharing
    AGGREGATORS aggregators; every choice comes from one generator."""

    def __init__(self, k: int, seed: int) -> None:
        self.k = k
        self.rng = np.random.default_rng(seed)
        self.rounds = {app_id: Round(1 + app_id, app_id % AGGREGATORS) for app_id in JOB_PORTS}
        """Each job's current sequence, the aggregator it names, and who sent to it."""
        self.sent: list[Step] = []
        self.shadow = reference(k)
        """The steps so far, run through a pipeline of its own: results free what is really held."""

    def pick(self, options: list) -> object:
        return options[int(self.rng.integers(len(options)))]

    def values(self) -> np.ndarray:
        return self.rng.integers(INT32.min, INT32.max, self.k, endpoint=True, dtype=np.int64).astype(np.int32)

    def header_bytes(self, app_id: int, bitmap: int, flags: int, seq: int, agtr: int) -> bytes:
        """atp_h with random fan_in (the switch writes its own) and new_agtr, and random values."""
        new_agtr = int(self.rng.integers(1 << 16))
        fan_in = int(self.rng.integers(256))
        return encode_payload(ATPHeader(bitmap, fan_in, flags, app_id, seq, agtr, new_agtr), self.values())

    def seq_and_agtr(self, app_id: int) -> dict[str, int]:
        """Mostly the job's current round; else the sequence before or after it (late or early)
        on any of the aggregators."""
        current = self.rounds[app_id]
        if self.rng.random() < 0.92:
            return {"seq": current.seq, "agtr": current.agtr}
        return {"seq": max(1, current.seq + int(self.pick([-1, 1]))), "agtr": int(self.rng.integers(AGGREGATORS))}

    def worker_packet(self, app_id: int, w: int, flags: int, **fields: int) -> bytes:
        header = {"bitmap": 1 << w, **self.seq_and_agtr(app_id)} | fields
        payload = self.header_bytes(app_id, flags=flags, **header)
        return build_frame(worker_endpoint(app_id, w), ps_endpoint(app_id), payload)

    def ps_packet(self, app_id: int, flags: int, **fields: int) -> bytes:
        header = {"bitmap": (1 << N) - 1, **self.seq_and_agtr(app_id)} | fields
        return build_frame(ps_endpoint(app_id), SWITCH_ADDRESS, self.header_bytes(app_id, flags=flags, **header))

    # -- the kinds of step -----------------------------------------------------------------

    def contribution(self) -> Step:
        app_id = int(self.pick(list(JOB_PORTS)))
        waiting = sorted(set(range(N)) - self.rounds[app_id].senders)
        w = int(self.pick(waiting)) if waiting and self.rng.random() < 0.8 else int(self.rng.integers(N))
        self.rounds[app_id].senders.add(w)
        flags = int(self.pick([0] * 12 + [params.FLAG_RESEND] * 3 + [params.FLAG_ECN] * 2 + [params.FLAG_OVERFLOW,
                                                                                               params.FLAG_COLLISION]))
        step = Step(JOB_PORTS[app_id][0][w], self.worker_packet(app_id, w, flags), f"job {app_id} worker {w}, flags {flags:#x}")
        self.sent.append(step)
        return step

    def repeated(self) -> Step:
        if not self.sent:
            return self.contribution()
        port, frame, what, _ = self.pick(self.sent[-6:] if self.rng.random() < 0.75 else self.sent)
        return Step(port, frame, f"again: {what}")

    def result(self) -> Step:
        held = [(self.shadow.owner(agtr), agtr) for agtr in range(AGGREGATORS)]
        held = [((app_id, seq), agtr) for (app_id, seq), agtr in held if seq and app_id in JOB_PORTS]
        if held and self.rng.random() < 0.5:  # the PS's result for a sequence the switch holds
            (app_id, seq), agtr = self.pick(held)
            flags = params.FLAG_ACK | int(self.pick([0, 0, 0, params.FLAG_COLLISION, params.FLAG_OVERFLOW]))
            frame = self.ps_packet(app_id, flags, seq=seq, agtr=agtr)
            return Step(JOB_PORTS[app_id][1], frame, f"result of job {app_id}'s held seq {seq}")
        app_id = int(self.pick(list(JOB_PORTS)))
        flags = params.FLAG_ACK | int(self.pick([0] * 8 + [params.FLAG_COLLISION, params.FLAG_ECN, params.FLAG_OVERFLOW,
                                                            params.FLAG_OVERFLOW | params.FLAG_RESEND]))
        frame = self.ps_packet(app_id, flags)
        if self.rng.random() < 0.7:  # the job moves on to its next sequence, on an aggregator of its choice
            self.rounds[app_id] = Round(self.rounds[app_id].seq + 1, int(self.rng.integers(AGGREGATORS)))
        return Step(JOB_PORTS[app_id][1], frame, f"result of job {app_id}'s PS, flags {flags:#x}")

    def untrusted(self) -> Step:
        app_id, other = (int(x) for x in self.rng.permutation(list(JOB_PORTS)))
        ports, ps_port = JOB_PORTS[app_id]
        variants: dict[str, Callable[[], tuple[int, bytes]]] = {
            "another job's app_id": lambda: (ports[0], with_app_id(self.worker_packet(app_id, 0, 0), other)),
            "another worker's bit": lambda: (ports[0], self.worker_packet(app_id, 0, 0, bitmap=0b10)),
            "a worker's ACK": lambda: (ports[1], self.worker_packet(app_id, 1, params.FLAG_ACK)),
            "a PS's non-result": lambda: (ps_port, self.ps_packet(app_id, 0)),
            "a PS's result for another job": lambda: (ps_port, with_app_id(self.ps_packet(app_id, params.FLAG_ACK), other)),
            "a worker's packet from another port": lambda: (JOB_PORTS[other][0][0], self.worker_packet(app_id, 0, 0)),
            "a stranger's packet": lambda: (ports[2], build_frame(STRANGER, ps_endpoint(app_id),
                                                                 self.header_bytes(app_id, 1, 0, 1, 0))),
        }
        name = str(self.pick(sorted(variants)))
        port, frame = variants[name]()
        return Step(port, frame, f"untrusted: {name}")

    def malformed(self) -> Step:
        app_id = int(self.pick(list(JOB_PORTS)))
        port = JOB_PORTS[app_id][0][0]
        good = self.worker_packet(app_id, 0, 0)
        variants: dict[str, Callable[[], bytes]] = {
            "truncated in atp_h or the values": lambda: good[: int(self.rng.integers(UDP_OFFSET + 8, len(good)))],
            "cut inside UDP (ordinary)": lambda: good[: int(self.rng.integers(UDP_OFFSET, UDP_OFFSET + 8))],
            "trailing bytes": lambda: good + self.rng.bytes(int(self.rng.integers(1, 17))),
            "udp.length + 4": lambda: with_udp_length_delta(good, 4),
            "udp.length - 4": lambda: with_udp_length_delta(good, -4),
            "aggregator beyond the pool": lambda: self.worker_packet(app_id, 0, 0, agtr=int(self.rng.integers(POOL, 1 << 16))),
            "sequence 0": lambda: self.worker_packet(app_id, 0, 0, seq=0),
        }
        name = str(self.pick(sorted(variants)))
        return Step(port, variants[name](), f"malformed: {name}")

    def ordinary(self) -> Step:
        port = int(self.pick(ALL_PORTS))
        src = str(self.pick(sorted(ORDINARY_HOSTS)))
        dst = str(self.pick([*sorted(ORDINARY_HOSTS), "02:00:00:00:aa:01", "ff:ff:ff:ff:ff:ff"]))
        addresses = (f"{FOREIGN_NET}{self.rng.integers(1, 255)}", f"{FOREIGN_NET}{self.rng.integers(1, 255)}")
        payload = self.rng.bytes(int(self.rng.integers(0, 64)))
        source = Endpoint(src, addresses[0], 1000)
        udp = build_frame(source, Endpoint(dst, addresses[1], int(self.rng.integers(1 << 16))), payload)
        variants: dict[str, Callable[[], bytes]] = {
            "IPv4/UDP": lambda: udp,
            "IPv4/UDP, wrong checksum": lambda: with_wrong_ipv4_checksum(udp),
            "IPv4/UDP to SwitchML's port": lambda: build_frame(source, Endpoint(dst, addresses[1], 0xBEE0), payload),
            "IPv4 with options to ATP's port": lambda: bytes(Ether(src=src, dst=dst)
                                                             / IP(src=addresses[0], dst=addresses[1], options=b"\x01\x01\x01\x00")
                                                             / UDP(dport=params.PS_UDP_PORT) / payload),
            "IPv4 cut inside its header": lambda: udp[: IPV4_OFFSET + int(self.rng.integers(1, 20))],
            "etherType 0x88B6": lambda: bytes(Ether(src=src, dst=dst, type=0x88B6) / payload),
            "802.1Q-tagged IPv4/UDP": lambda: vlan_tagged(udp, int(self.rng.integers(1, 4095))),
        }
        name = str(self.pick(sorted(variants)))
        return Step(port, variants[name](), f"ordinary from port {port}: {name} to {dst}")

    def lossy(self) -> Step:
        """A contribution, a result or ordinary traffic through a drop simulator that drops
        every frame on arrival, or every copy it makes on the way out."""
        step = self.pick([self.contribution, self.contribution, self.result, self.ordinary])()
        drops = self.pick(LOSSES)
        return step._replace(what=f"{step.what}, drop probabilities {drops}", drops=drops)

    def steps(self, count: int) -> list[Step]:
        kinds = [(self.contribution, 40), (self.repeated, 10), (self.result, 18), (self.untrusted, 8), (self.malformed, 10),
                 (self.ordinary, 14), (self.lossy, 6)]
        weights = np.array([weight for _, weight in kinds], dtype=float)
        steps = []
        for _ in range(count):
            steps.append(kinds[int(self.rng.choice(len(kinds), p=weights / weights.sum()))][0]())
            through(self.shadow, steps[-1])
        return steps


def with_app_id(frame: bytes, app_id: int) -> bytes:
    offset = ATP_OFFSET + FIELD_OFFSETS["app_id"]
    return frame[:offset] + app_id.to_bytes(2, "big") + frame[offset + 2:]


def with_udp_length_delta(frame: bytes, delta: int) -> bytes:
    length = int.from_bytes(frame[UDP_LENGTH_OFFSET:UDP_LENGTH_OFFSET + 2], "big") + delta
    return frame[:UDP_LENGTH_OFFSET] + length.to_bytes(2, "big") + frame[UDP_LENGTH_OFFSET + 2:]


def with_wrong_ipv4_checksum(frame: bytes) -> bytes:
    checksum = IPV4_OFFSET + 10
    return frame[:checksum] + bytes([frame[checksum] ^ 0x5A]) + frame[checksum + 1:]


def program_hosts(switch: ATPSwitchDriver) -> ATPSwitchDriver:
    """What the sequences need beyond atp_switch_cases.program: the known ordinary hosts and the
    default ECN threshold."""
    for mac, port in ORDINARY_HOSTS.items():
        switch.program_host(mac, port)
    switch.set_ecn_threshold(params.DEFAULT_ECN_THRESHOLD)
    return switch


def reference(k: int) -> EmbeddedATPSwitch:
    """The embedded pipeline programmed as the targets are."""
    return program_hosts(program(EmbeddedATPSwitch(k, POOL)))


Outcome = tuple[list[tuple[int, bytes]], dict[str, tuple[int, int]]]


def egress_events(counters: dict[str, tuple[int, int]]) -> int:
    """Copies egress counted, sent or dropped by the drop simulator."""
    return counters["EGV_SENT"][0] + counters["EGV_DROP_SIM_EGRESS"][0]


def through(switch: ATPSwitchDriver, step: Step, egress_copies: int | None = None) -> Outcome:
    """``step`` into ``switch``, through its drop simulator if the step is lossy (``egress_copies``:
    what the reference's egress counted for it, ``ATPSwitchDriver.process_lossy``)."""
    if step.drops == NO_LOSS:
        frames = switch.process(step.port, step.frame)
    else:
        frames = switch.process_lossy(step.port, step.frame, step.drops, egress_copies)
    return frames, switch.counter_cells()


def describe(frame: bytes, k: int) -> str:
    decoded = decode_payload(frame[ATP_OFFSET:], k)
    return f"{len(frame)} B" + ("" if decoded is None else f" {decoded[0]}")


def assert_sends_and_counts_as_the_reference(target: ATPSwitchDriver, name: str, seed: int, count: int) -> None:
    """``count`` steps of ``seed``'s sequence into ``target`` (programmed by atp_switch_cases.program
    and program_hosts) and into the reference; the first step where they differ fails the test
    with what was sent, what each sent out, and the steps before."""
    k = target.k
    steps = SequenceBuilder(k, seed).steps(count)
    expected_run = reference(k)
    before = expected_run.counter_cells()
    for index, step in enumerate(steps):
        expected = through(expected_run, step)
        frames, counters = through(target, step, egress_events(expected[1]) - egress_events(before))
        before = expected[1]
        if (frames, counters) != expected:
            port, frame, what, _ = step
            lines = [f"seed {seed}, step {index}: port {port} sent {what} ({describe(frame, k)})", f"  bytes {frame.hex()}",
                     f"  embedded: {[(p, describe(f, k)) for p, f in expected[0]]}",
                     f"  {name}: {[(p, describe(f, k)) for p, f in frames]}"]
            lines += [f"  copy {i} differs from byte {next((j for j, (a, b) in enumerate(zip(e[1], g[1])) if a != b), None)}"
                      for i, (e, g) in enumerate(zip(expected[0], frames)) if e != g]
            lines += [f"  {counter}: embedded {expected[1][counter]}, {name} {counters[counter]}"
                      for counter in counters if counters[counter] != expected[1][counter]]
            lines += [f"  before: {steps[i].what}" for i in range(max(0, index - 4), index)]
            pytest.fail(f"{name} and the embedded pipeline differ:\n" + "\n".join(lines), pytrace=False)
    for register in programming.AGGREGATOR_REGISTERS:
        assert target.control.register_read(register) == expected_run.control.register_read(register), register
    assert sum(counters[event][0] for event in params.INGRESS_EVENTS) == len(steps)
    assert all(counters[event][0] for event in (*params.INGRESS_EVENTS, "EGV_SENT", "EGV_DROP_SIM_EGRESS")), \
        f"a path the sequence never took: {counters}"
