"""ATP's P4 program (p4/atp/) on bmv2, against the embedded pipeline it mirrors.

- The behaviour cases of atp-protocol.md that are about the switch run here unchanged: they
  are tests/test_atp_switch.py's own functions, given ``Bmv2ATPSwitch`` (the driver interface of
  tests/atp_switch_driver.py, over real frames) as their ``switch`` fixture instead of the
  embedded one.
- A differential test feeds seeded random frame sequences (every path of ATPIngress and
  ATPEgress, malformed, untrusted and ordinary frames too) to bmv2 and to the embedded
  ATPPipeline, programmed with the same calls, and asserts the same frames out of the same
  ports, byte for byte, and the same counters after every step.
- ECN from bmv2's own egress queue (deq_qdepth), which lock-step driving never fills.
- Contract checks that need no switch: the checked-in generated code is current, and the
  compiled program's tables, registers and counters are the embedded pipeline's.

Skipped, saying why, where bmv2 or p4c is missing (tests/conftest.py's require_target) or
without root (network namespaces).
"""

from __future__ import annotations

import contextlib
import inspect
import time
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

import test_atp_switch as cases
from atp_network import ps_endpoint, worker_endpoint
from atp_switch_driver import ATPSwitchDriver, EmbeddedATPSwitch, Frames
from base.netns import Testbed
from protocol.atp import params
from protocol.atp.packet import ATP_OFFSET, FIELD_OFFSETS, ATPHeader, decode_payload, encode_payload, frame_bytes
from protocol.packet import IPV4_OFFSET, UDP_OFFSET, Endpoint, build_frame, ipv4_checksum
from switches import standalone
from switches.bmv2.atp.control import ETHERNET_OVERHEAD_BYTES, packets_per_second
from switches.bmv2.atp.switch import run_atp_bmv2
from switches.embedded.atp.pipeline import ATPPipeline
from tests.conftest import require_target
from switches.bmv2.atp import programming
from switches.control import SwitchControl
from tests.switch_io import SwitchPorts
from tests.test_switch_differential import PROBE_MIN_BYTES, collect, probe_frame

pytestmark = [pytest.mark.bmv2]

K, POOL, N = cases.K, cases.POOL, cases.N
HOSTS = 8
"""Ports 0..7 of the cases: two jobs of three workers and their PSes (test_atp_switch.JOB_PORTS)."""
GENERATOR = params.ATP_P4_DIR / "gen_elements.py"
PROBE_SENDERS = (0, 1)
"""Hosts the bmv2 driver's probes come from: together they reach every port."""
WAIT_S = 5.0
"""Longest wait for bmv2's ingress counter to count a frame: far beyond what a healthy switch needs."""


def require_bmv2_and_root() -> None:
    require_target("bmv2")
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")


# -- contract: no switch needed ---------------------------------------------------------------


def test_the_checked_in_per_value_code_is_what_the_generator_writes() -> None:
    checked = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("k", params.K_CHOICES)
def test_bmv2_offers_the_control_plane_the_embedded_pipelines_tables_registers_and_counters(k: int, tmp_path: Path) -> None:
    """Actions and their parameters, key widths, table, register and counter sizes, as the
    control plane checks its calls against them (SwitchControl.schema): the same on both
    targets, or one set of programming calls could not program both. Key names are p4c's
    rendering of the same fields (``ipv4.srcAddr`` for ``hdr.ipv4.srcAddr``)."""
    require_target("bmv2")
    pool = 16
    with run_atp_bmv2({}, tmp_path, k=k, pool_size=pool) as (_, control):
        compiled = control.schema
    embedded = ATPPipeline(k, pool).schema()
    tables = {name: table for name, table in compiled.tables.items() if not name.rpartition(".")[2].startswith("tbl_")}
    assert set(tables) == set(embedded.tables)
    for name, table in embedded.tables.items():
        assert (tables[name].actions, tables[name].size) == (table.actions, table.size), name
        assert key_fields(tables[name].keys) == key_fields(table.keys), name
    assert dict(compiled.registers) == dict(embedded.registers)
    assert dict(compiled.counters) == dict(embedded.counters)


def key_fields(keys: tuple) -> list[tuple[str, int]]:
    """(the field's own name, its width) of each key: p4c and the embedded pipeline prefix them differently."""
    return [(field.name.rpartition(".")[2], field.bits) for field in keys]


# -- a bmv2 switch on a test bed --------------------------------------------------------------


class Bmv2ATPSwitch(ATPSwitchDriver):
    """simple_switch running p4/atp/atp.p4, host p of ``ports``' test bed on bmv2 port p + 1.

    Lock-step, as tests/test_switch_differential.py drives SwitchML's bmv2: send the frame,
    wait until the ingress counter counted it, then send a broadcast probe from two hosts;
    bmv2 keeps each egress port's order, so what a port sends before its probe is the frame's
    output. The probes are ordinary traffic the cases never sent, so ``counters`` leaves
    them out (each is one EV_FORWARDED and a copy to every other port)."""

    def __init__(self, control: SwitchControl, ports: SwitchPorts, k: int, pool_size: int) -> None:
        super().__init__(control, k, pool_size)
        self.ports = ports
        self._steps = 0
        self._probes = 0
        programming.program_flood(control, [self.switch_port(port) for port in range(len(ports.sockets))])

    def switch_port(self, port: int) -> int:
        return port + 1

    def program_flood(self, ports: Sequence[int]) -> None:
        """Already there: the probes need it. Every port of the test bed floods."""
        assert sorted(ports) == list(range(len(self.ports.sockets))), "the bmv2 driver floods to every host"

    def _ingress_total(self) -> int:
        return sum(packets for packets, _ in self.control.counter_read(programming.EVENT_COUNTER))

    def process(self, in_port: int, frame: bytes) -> Frames:
        step = self._steps
        self._steps += 1
        before = self._ingress_total()
        self.ports.send(in_port, frame)
        deadline = time.monotonic() + WAIT_S
        while self._ingress_total() <= before:
            assert time.monotonic() < deadline, f"step {step}: the frame never reached bmv2's ingress (no event counted)"
            time.sleep(0.001)
        probes = {sender: probe_frame(sender, step) for sender in PROBE_SENDERS}
        for sender, probe in probes.items():
            self.ports.send(sender, probe)
        self._probes += len(probes)
        received = collect(self.ports, probes, "bmv2", step)
        return [(port, copy) for port, copies in enumerate(received) for copy in copies]

    def counter_cells(self) -> dict[str, tuple[int, int]]:
        cells = super().counter_cells()
        copies = self._probes * (len(self.ports.sockets) - 1)
        for name, frames in (("EV_FORWARDED", self._probes), ("EGV_SENT", copies)):
            packets, byte_count = cells[name]
            cells[name] = (packets - frames, byte_count - frames * PROBE_MIN_BYTES)
        return cells


@pytest.fixture(scope="module")
def testbed() -> Iterator[Testbed]:
    """HOSTS namespaces cabled to bmv2 ports 1..HOSTS."""
    require_bmv2_and_root()
    with standalone.testbed(HOSTS) as bed:
        yield bed


@contextlib.contextmanager
def bmv2_switch(testbed: Testbed, log_dir: Path, k: int = K, pool_size: int = POOL) -> Iterator[Bmv2ATPSwitch]:
    """A fresh simple_switch with atp.json (cached build), its ECN threshold the program's default."""
    commands = log_dir / "commands.txt"
    with run_atp_bmv2(testbed.switch_ports, log_dir, k=k, pool_size=pool_size, command_log=commands) as (_, control):
        ports = SwitchPorts(testbed)
        try:
            switch = Bmv2ATPSwitch(control, ports, k, pool_size)
            switch.set_ecn_threshold(params.DEFAULT_ECN_THRESHOLD)
            yield switch
        finally:
            ports.close()


@pytest.fixture
def switch(testbed: Testbed, tmp_path: Path) -> Iterator[ATPSwitchDriver]:
    """test_atp_switch's two jobs on a fresh bmv2 (its cases take this ``switch``)."""
    with bmv2_switch(testbed, tmp_path) as bmv2:
        yield cases.program_jobs(bmv2)


# -- the behaviour cases, on bmv2 -------------------------------------------------------------
# test_atp_switch's functions, collected here too: pytest gives them this module's ``switch``.

SWITCH_CASES = [name for name, case in vars(cases).items()
                if name.startswith("test_") and "switch" in inspect.signature(case).parameters]
"""Every case that drives the ``switch`` fixture; the others are about the hosts or the embedded
pipeline's own queue hook."""
globals().update({name: getattr(cases, name) for name in SWITCH_CASES})


# -- differential: the same frames into bmv2 and the embedded pipeline ---------------------

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
Step = tuple[int, bytes, str]
"""(ingress port, frame, what it is for the failure message)."""


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
        self.rounds = {app_id: Round(1 + app_id, app_id % AGGREGATORS) for app_id in cases.JOB_PORTS}
        """Each job's current sequence, the aggregator it names, and who sent to it."""
        self.sent: list[Step] = []
        self.shadow = program(EmbeddedATPSwitch(k, POOL))
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
        switch_address = Endpoint("02:53:4d:4c:00:01", "10.0.0.254", params.SWITCH_UDP_PORT)
        return build_frame(ps_endpoint(app_id), switch_address, self.header_bytes(app_id, flags=flags, **header))

    # -- the kinds of step -----------------------------------------------------------------

    def contribution(self) -> Step:
        app_id = int(self.pick(list(cases.JOB_PORTS)))
        waiting = sorted(set(range(N)) - self.rounds[app_id].senders)
        w = int(self.pick(waiting)) if waiting and self.rng.random() < 0.8 else int(self.rng.integers(N))
        self.rounds[app_id].senders.add(w)
        flags = int(self.pick([0] * 12 + [params.FLAG_RESEND] * 3 + [params.FLAG_ECN] * 2 + [params.FLAG_OVERFLOW,
                                                                                               params.FLAG_COLLISION]))
        step = (cases.JOB_PORTS[app_id][0][w], self.worker_packet(app_id, w, flags), f"job {app_id} worker {w}, flags {flags:#x}")
        self.sent.append(step)
        return step

    def repeated(self) -> Step:
        if not self.sent:
            return self.contribution()
        port, frame, what = self.pick(self.sent[-6:] if self.rng.random() < 0.75 else self.sent)
        return port, frame, f"again: {what}"

    def result(self) -> Step:
        held = [(self.shadow.owner(agtr), agtr) for agtr in range(AGGREGATORS)]
        held = [((app_id, seq), agtr) for (app_id, seq), agtr in held if seq and app_id in cases.JOB_PORTS]
        if held and self.rng.random() < 0.5:  # the PS's result for a sequence the switch holds
            (app_id, seq), agtr = self.pick(held)
            flags = params.FLAG_ACK | int(self.pick([0, 0, 0, params.FLAG_COLLISION, params.FLAG_OVERFLOW]))
            frame = self.ps_packet(app_id, flags, seq=seq, agtr=agtr)
            return cases.JOB_PORTS[app_id][1], frame, f"result of job {app_id}'s held seq {seq}"
        app_id = int(self.pick(list(cases.JOB_PORTS)))
        flags = params.FLAG_ACK | int(self.pick([0] * 8 + [params.FLAG_COLLISION, params.FLAG_ECN, params.FLAG_OVERFLOW,
                                                            params.FLAG_OVERFLOW | params.FLAG_RESEND]))
        frame = self.ps_packet(app_id, flags)
        if self.rng.random() < 0.7:  # the job moves on to its next sequence, on an aggregator of its choice
            self.rounds[app_id] = Round(self.rounds[app_id].seq + 1, int(self.rng.integers(AGGREGATORS)))
        return cases.JOB_PORTS[app_id][1], frame, f"result of job {app_id}'s PS, flags {flags:#x}"

    def untrusted(self) -> Step:
        app_id, other = (int(x) for x in self.rng.permutation(list(cases.JOB_PORTS)))
        ports, ps_port = cases.JOB_PORTS[app_id]
        variants: dict[str, Callable[[], tuple[int, bytes]]] = {
            "another job's app_id": lambda: (ports[0], with_app_id(self.worker_packet(app_id, 0, 0), other)),
            "another worker's bit": lambda: (ports[0], self.worker_packet(app_id, 0, 0, bitmap=0b10)),
            "a worker's ACK": lambda: (ports[1], self.worker_packet(app_id, 1, params.FLAG_ACK)),
            "a PS's non-result": lambda: (ps_port, self.ps_packet(app_id, 0)),
            "a PS's result for another job": lambda: (ps_port, with_app_id(self.ps_packet(app_id, params.FLAG_ACK), other)),
            "a worker's packet from another port": lambda: (cases.JOB_PORTS[other][0][0], self.worker_packet(app_id, 0, 0)),
            "a stranger's packet": lambda: (ports[2], build_frame(STRANGER, ps_endpoint(app_id),
                                                                 self.header_bytes(app_id, 1, 0, 1, 0))),
        }
        name = str(self.pick(sorted(variants)))
        port, frame = variants[name]()
        return port, frame, f"untrusted: {name}"

    def malformed(self) -> Step:
        app_id = int(self.pick(list(cases.JOB_PORTS)))
        port = cases.JOB_PORTS[app_id][0][0]
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
        return port, variants[name](), f"malformed: {name}"

    def ordinary(self) -> Step:
        port = int(self.rng.integers(HOSTS))
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
        }
        name = str(self.pick(sorted(variants)))
        return port, variants[name](), f"ordinary from port {port}: {name} to {dst}"

    def steps(self, count: int) -> list[Step]:
        kinds = [(self.contribution, 40), (self.repeated, 10), (self.result, 18), (self.untrusted, 8), (self.malformed, 10),
                 (self.ordinary, 14)]
        weights = np.array([weight for _, weight in kinds], dtype=float)
        steps = []
        for _ in range(count):
            steps.append(kinds[int(self.rng.choice(len(kinds), p=weights / weights.sum()))][0]())
            self.shadow.process(*steps[-1][:2])
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


def program(switch: ATPSwitchDriver) -> ATPSwitchDriver:
    """Both jobs, the flood group, the known ordinary hosts, the default ECN threshold."""
    cases.program_jobs(switch)
    switch.program_flood(list(range(HOSTS)))
    for mac, port in ORDINARY_HOSTS.items():
        switch.program_host(mac, port)
    switch.set_ecn_threshold(params.DEFAULT_ECN_THRESHOLD)
    return switch


Outcome = tuple[list[tuple[int, bytes]], dict[str, tuple[int, int]]]


def run(switch: ATPSwitchDriver, steps: list[Step]) -> Iterator[Outcome]:
    for port, frame, _ in steps:
        yield switch.process(port, frame), switch.counter_cells()


def describe(frame: bytes, k: int) -> str:
    decoded = decode_payload(frame[ATP_OFFSET:], k)
    return f"{len(frame)} B" + ("" if decoded is None else f" {decoded[0]}")


@pytest.mark.parametrize("case", sorted(DIFFERENTIAL_CASES))
def test_bmv2_sends_and_counts_what_the_embedded_pipeline_does(case: str, testbed: Testbed, tmp_path: Path) -> None:
    k, seed, count = DIFFERENTIAL_CASES[case]
    steps = SequenceBuilder(k, seed).steps(count)
    reference = program(EmbeddedATPSwitch(k, POOL))
    with bmv2_switch(testbed, tmp_path, k) as bmv2:
        program(bmv2)
        for index, (expected, (frames, counters)) in enumerate(zip(run(reference, steps), run(bmv2, steps), strict=True)):
            if (frames, counters) != expected:
                port, frame, what = steps[index]
                lines = [f"seed {seed}, step {index}: port {port} sent {what} ({describe(frame, k)})", f"  bytes {frame.hex()}",
                         f"  embedded: {[(p, describe(f, k)) for p, f in expected[0]]}",
                         f"  bmv2:     {[(p, describe(f, k)) for p, f in frames]}"]
                lines += [f"  copy {i} differs from byte {next((j for j, (a, b) in enumerate(zip(e[1], g[1])) if a != b), None)}"
                          for i, (e, g) in enumerate(zip(expected[0], frames)) if e != g]
                lines += [f"  {name}: embedded {expected[1][name]}, bmv2 {counters[name]}"
                          for name in counters if counters[name] != expected[1][name]]
                lines += [f"  before: {steps[i][2]}" for i in range(max(0, index - 4), index)]
                pytest.fail("bmv2 and the embedded pipeline differ:\n" + "\n".join(lines), pytrace=False)
    assert sum(counters[name][0] for name in params.INGRESS_EVENTS) == len(steps)
    assert all(counters[name][0] for name in params.INGRESS_EVENTS), f"a path the sequence never took: {counters}"


# -- ECN from bmv2's own egress queue ---------------------------------------------------------

BURST = 12
QUEUE_RATE_PPS = 40
"""Slow enough that a burst queues at the PS's port (0.3 s to drain), fast enough for a test."""
ECN_THRESHOLD = 3


@pytest.mark.parametrize("link_mbps", [0.5, 10.0, 1000.0])
def test_a_ports_queue_rate_is_what_its_link_drains(link_mbps: float) -> None:
    size = frame_bytes(K) + ETHERNET_OVERHEAD_BYTES
    rate = packets_per_second(link_mbps * 1e6, frame_bytes(K))
    assert rate * size * 8 <= link_mbps * 1e6 < (rate + 1) * size * 8


def send_burst(switch: Bmv2ATPSwitch, seq: int) -> list[bytes]:
    """BURST OVERFLOW packets of job 1's worker 0 (to the PS untouched) at once; what the PS's host received."""
    port = cases.JOB_PORTS[1][0][0]
    for i in range(BURST):
        switch.ports.send(port, cases.update(1, 0, seq + i, 5, cases.vals(i), params.FLAG_OVERFLOW)[1])
    received = switch.ports.receive(BURST, timeout=BURST / QUEUE_RATE_PPS + 5.0)
    return [bytes(frame) for frame in received.frames[cases.JOB_PORTS[1][1]]]


def test_egress_marks_ecn_from_the_depth_of_bmv2s_egress_queue(testbed: Testbed, tmp_path: Path) -> None:
    """A port drained at a set rate queues a burst: the copies that leave a queue at least
    ecn_threshold deep are marked (ATP flag and IPv4 CE, checksum updated) and counted, the
    others not; with the threshold 0 nothing is."""
    with bmv2_switch(testbed, tmp_path) as switch:
        cases.program_jobs(switch)
        switch.control.set_port_queue(switch.switch_port(cases.JOB_PORTS[1][1]), QUEUE_RATE_PPS, 64)
        switch.set_ecn_threshold(ECN_THRESHOLD)
        frames = send_burst(switch, 1)
        assert len(frames) == BURST
        marked = [frame for frame in frames if decode_payload(frame[ATP_OFFSET:], K)[0].flags & params.FLAG_ECN]
        assert 0 < len(marked) < BURST, "a burst fills the queue, and its last packet leaves an empty one"
        for frame in frames:
            is_marked = frame in marked
            assert (frame[IPV4_OFFSET + 1] & 0b11 == 0b11) == is_marked
            assert ipv4_checksum(frame, IPV4_OFFSET) == int.from_bytes(frame[IPV4_OFFSET + 10:IPV4_OFFSET + 12], "big")
        assert switch.egress_packets() == [BURST, len(marked)]

        switch.set_ecn_threshold(0)
        frames = send_burst(switch, 1 + BURST)
        assert len(frames) == BURST and not any(decode_payload(f[ATP_OFFSET:], K)[0].flags & params.FLAG_ECN for f in frames)
        assert switch.egress_packets() == [2 * BURST, len(marked)]
