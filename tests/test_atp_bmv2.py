"""ATP's P4 program (p4/atp/) on bmv2, against the embedded pipeline it mirrors.

- The behaviour cases of atp-protocol.md that involve the switch run here unchanged:
  tests/atp_switch_cases.py's ``SwitchCases``, given ``Bmv2ATPSwitch`` (the driver interface of
  tests/atp_switch_driver.py, over real frames) as their ``switch`` fixture.
- The differential test (tests/atp_differential.py) feeds seeded random frame sequences (every
  path of ATPIngress and ATPEgress, malformed, untrusted and ordinary frames too) to bmv2 and
  to the embedded ATPPipeline, programmed with the same calls, and asserts the same frames out
  of the same ports, byte for byte, and the same counters after every step.
- ECN from bmv2's own egress queue (deq_qdepth), which lock-step driving never fills.
- Contract checks that need no switch: the checked-in generated code is current, and the
  compiled program's tables, registers and counters are the embedded pipeline's.

Skipped, saying why, where bmv2 or p4c is missing (tests/conftest.py's require_target) or
without root (network namespaces).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

import pytest

import atp_switch_cases as cases
from atp_differential import DIFFERENTIAL_CASES, assert_sends_and_counts_as_the_reference, program_hosts
from atp_switch_cases import ALL_PORTS, SwitchCases, program
from atp_switch_driver import ATPSwitchDriver, Copies
from base.netns import Testbed
from protocol.atp import params
from protocol.atp.packet import ATP_OFFSET, decode_payload, frame_bytes
from protocol.packet import IPV4_OFFSET, ipv4_checksum
from switches import standalone
from switches.atp import programming
from switches.bmv2.atp.control import ETHERNET_OVERHEAD_BYTES, packets_per_second
from switches.bmv2.atp.switch import ATPBmv2Process, run_atp_bmv2
from switches.control import SwitchControl
from switches.embedded.atp.pipeline import ATPPipeline
from tests.conftest import ON_THE_BENCH, require_target
from tests.switch_io import SwitchPorts
from tests.test_switch_differential import PROBE_MIN_BYTES, collect, probe_frame

pytestmark = [pytest.mark.bmv2, ON_THE_BENCH]  # a standalone test bed: beside the network tests (-n)

K, POOL = cases.K, cases.POOL
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
    """simple_switch running p4/atp.p4, host p of ``ports``' test bed on bmv2 port p + 1.

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

    def reset(self) -> None:
        super().reset()
        self._probes = 0

    def _ingress_total(self) -> int:
        return sum(packets for packets, _ in self.control.counter_read(programming.EVENT_COUNTER))

    def _egress_total(self) -> int:
        """Copies egress counted, sent or dropped by the drop simulator."""
        counted = self.counters()
        return counted["EGV_SENT"] + counted["EGV_DROP_SIM_EGRESS"]

    def _send(self, in_port: int, frame: bytes) -> int:
        """``frame`` sent, once bmv2's ingress counted it: the step's number."""
        step = self._steps
        self._steps += 1
        before = self._ingress_total()
        self.ports.send(in_port, frame)
        deadline = time.monotonic() + WAIT_S
        while self._ingress_total() <= before:
            assert time.monotonic() < deadline, f"step {step}: the frame never reached bmv2's ingress (no event counted)"
            time.sleep(0.001)
        return step

    def process(self, in_port: int, frame: bytes) -> Copies:
        return self._probe(self._send(in_port, frame))

    def process_lossy(self, in_port: int, frame: bytes, drops: tuple[float, float], egress_copies: int | None) -> Copies:
        """The drop simulator stays on until egress, which runs after ingress counted the frame,
        counted as many copies as the reference's did (sent or dropped; a target that makes
        others is left to the comparison after WAIT_S); the probes, which it would drop too,
        go once it is off."""
        before = self._egress_total()
        self.set_drop_probability(*drops)
        try:
            step = self._send(in_port, frame)
            deadline = time.monotonic() + WAIT_S
            while egress_copies is not None and self._egress_total() < before + egress_copies and time.monotonic() < deadline:
                time.sleep(0.001)
        finally:
            self.set_drop_probability(0.0, 0.0)
        return self._probe(step)

    def _probe(self, step: int) -> Copies:
        """What each port sent before the step's probes arrived."""
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
    """A namespace per port of the cases (ALL_PORTS), host p cabled to bmv2 port p + 1."""
    require_bmv2_and_root()
    with standalone.testbed(len(ALL_PORTS)) as bed:
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
    """The cases' flood group and two jobs on a fresh bmv2."""
    with bmv2_switch(testbed, tmp_path) as bmv2:
        yield program(bmv2)


# -- the behaviour cases, on bmv2 -------------------------------------------------------------


class TestSwitchCases(SwitchCases):
    """atp_switch_cases's cases on bmv2 (this module's ``switch``)."""


# -- differential: the same frames into bmv2 and the embedded pipeline ---------------------


@pytest.mark.parametrize("case", sorted(DIFFERENTIAL_CASES))
def test_bmv2_sends_and_counts_what_the_embedded_pipeline_does(case: str, testbed: Testbed, tmp_path: Path) -> None:
    k, seed, count = DIFFERENTIAL_CASES[case]
    with bmv2_switch(testbed, tmp_path, k) as bmv2:
        assert_sends_and_counts_as_the_reference(program_hosts(program(bmv2)), "bmv2", seed, count)


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
        program(switch)
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
        assert switch.egress_packets() == [BURST, len(marked), 0]

        switch.set_ecn_threshold(0)
        frames = send_burst(switch, 1 + BURST)
        assert len(frames) == BURST and not any(decode_payload(f[ATP_OFFSET:], K)[0].flags & params.FLAG_ECN for f in frames)
        assert switch.egress_packets() == [2 * BURST, len(marked), 0]


def test_on_a_network_each_ports_queue_holds_its_links_and_marks_at_the_default_threshold(testbed: Testbed, tmp_path: Path) -> None:
    """Started as a network starts it, with the links' rate and queue limit (``for_ports``), every
    port's queue is as deep as its link's: frames sent into one port faster than it drains queue
    past ATP's default threshold, and copies are marked there. (With bmv2's default depth, the
    threshold itself, none would be: a copy's deq_qdepth counts the copies left behind it, at most
    the depth less one.) They go 1 ms apart: sent back to back, only the first 32 reach bmv2's
    pipeline here, too few to fill the queue."""
    depth = params.DEFAULT_ECN_THRESHOLD + 8
    rate_bps = 200 * (frame_bytes(K) + ETHERNET_OVERHEAD_BYTES) * 8
    """200 frames a second: a fifth of the rate they are sent at."""
    process = ATPBmv2Process.for_ports(testbed.switch_ports, tmp_path, name="atp-queue", k=K, max_pool_size=POOL,
                                       port_rate_bps=rate_bps, port_queue_packets=depth)
    process.start()
    try:
        with process.control(tmp_path / "commands.txt") as control:
            ports = SwitchPorts(testbed)
            try:
                switch = Bmv2ATPSwitch(control, ports, K, POOL)
                switch.set_ecn_threshold(params.DEFAULT_ECN_THRESHOLD)
                program(switch)
                worker, ps = cases.JOB_PORTS[1][0][0], cases.JOB_PORTS[1][1]
                for i in range(2 * depth):
                    ports.send(worker, cases.update(1, 0, 1 + i, 5, cases.vals(i), params.FLAG_OVERFLOW)[1])
                    time.sleep(0.001)
                frames = [bytes(frame) for frame in ports.receive(2 * depth, timeout=2 * depth / 200 + 5.0).frames[ps]]
            finally:
                ports.close()
    finally:
        process.stop()
    assert any(decode_payload(frame[ATP_OFFSET:], K)[0].flags & params.FLAG_ECN for frame in frames)
