"""One interface to ATP's switch on every target, so the behaviour cases and the differential
test run the same frames against each: ``process(in_port, frame)`` returns the (port, frame)
copies that leave, sorted by port (a port's own copies in the order they left), and
``control`` is the target's SwitchControl (tables, registers, counters by their names in
docs/dataplane-atp.md).

``EmbeddedATPSwitch`` is the reference pipeline in memory. ``EbpfATPSwitch`` is atp.bpf.c on
the veths of a Testbed: port p is host p's cable; a frame is sent from host p's raw socket,
and the call returns once the program counted the frame's ingress event (it counts it after
every copy's egress event) and as many frames as it counted at egress have arrived.
"""

from __future__ import annotations

import multiprocessing
import select
import time
from typing import Mapping, Protocol, Sequence

import numpy as np

from protocol.atp import params
from switches.control import SwitchControl
from switches.ebpf.atp import programming
from switches.ebpf.atp.datapath import AtpEbpfDataPlane
from switches.embedded.atp.egress import QueueDepth, no_queue
from switches.embedded.atp.pipeline import ATPPipeline
from switches.embedded.control_server import pipeline_handlers
from switches.remote_control import InProcessControl
from base.netns import Testbed
from tests.switch_io import SwitchPorts

Copies = list[tuple[int, bytes]]
WAIT_S = 5.0
"""Longest wait for a frame's ingress event or its copies: far beyond what a healthy switch needs."""
SENT = params.EGRESS_EVENT["EGV_SENT"]
FORK = multiprocessing.get_context("fork")
"""blast()'s senders: processes, which send on the raw sockets they inherit in parallel (threads
would take turns at the GIL between two sends)."""


class ATPSwitch(Protocol):
    control: SwitchControl

    def process(self, in_port: int, frame: bytes) -> Copies: ...


class EmbeddedATPSwitch:
    """switches/embedded/atp's ATPPipeline, programmed through its in-process control."""

    def __init__(self, k: int, pool_size: int, queue_depth: QueueDepth = no_queue) -> None:
        self.pipeline = ATPPipeline(k, pool_size, queue_depth)
        self.control: SwitchControl = InProcessControl(pipeline_handlers(self.pipeline, dict))

    def process(self, in_port: int, frame: bytes) -> Copies:
        return sorted(self.pipeline.process(in_port, frame), key=lambda copy: copy[0])


class EbpfATPSwitch:
    """atp.bpf.c on ``testbed``'s switch ports, renumbered 0..n-1 by host."""

    def __init__(self, testbed: Testbed, k: int, pool_size: int, port_rate_bps: float | None = None) -> None:
        ports = {host.index: testbed.switch_ports[host.switch_port] for host in testbed.hosts}
        self.data_plane = AtpEbpfDataPlane(ports, k=k, pool_size=pool_size, name="atp-tests", port_rate_bps=port_rate_bps)
        self.data_plane.start()
        try:
            self.control: SwitchControl = self.data_plane.control()
            self.ports = SwitchPorts(testbed)
        except BaseException:
            self.data_plane.stop()
            raise

    def close(self) -> None:
        self.ports.close()
        self.control.close()
        self.data_plane.stop()

    def _counted(self) -> tuple[int, int]:
        ingress = sum(packets for packets, _bytes in self.control.counter_read(programming.EVENT_COUNTER))
        return ingress, self.control.counter_read(programming.EGRESS_COUNTER)[SENT][0]

    def process(self, in_port: int, frame: bytes) -> Copies:
        counted = self._counted()
        self.ports.send(in_port, frame)
        return self._copies(counted, 1)

    def blast(self, frames: Mapping[int, Sequence[bytes]]) -> Copies:
        """Every port's frames sent back to back, the ports at once (a process each), so the
        kernel runs the program for them on several cores together: the copies that leave."""
        counted = self._counted()
        start = FORK.Barrier(len(frames))

        def send(port: int, burst: Sequence[bytes]) -> None:
            start.wait()  # all at once, not one after the other as they fork
            for frame in burst:
                self.ports.send(port, frame)

        senders = [FORK.Process(target=send, args=(port, burst)) for port, burst in frames.items()]
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        return self._copies(counted, sum(len(burst) for burst in frames.values()))

    def _copies(self, counted: tuple[int, int], total: int) -> Copies:
        """Once the ingress events of ``total`` more frames than ``counted`` are in, the copies
        the egress counter says they made."""
        ingress, sent = counted
        deadline = time.monotonic() + WAIT_S
        while (now := self._counted())[0] < ingress + total:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the eBPF switch counted {now[0] - ingress} of the {total} frames sent")
        copies: Copies = []
        sockets = self.ports.sockets
        while len(copies) < now[1] - sent:
            ready, _, _ = select.select(sockets, [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"{len(copies)} of the {now[1] - sent} copies the eBPF switch sent arrived")
            for sock in ready:
                port = sockets.index(sock)
                received = self.ports.receive_frame(port)
                if received is not None:
                    copies.append((port, received))
        return sorted(copies, key=lambda copy: copy[0])

    def stray_frames(self, grace_s: float = 0.2) -> Copies:
        """Frames that arrived beyond what the egress counter accounts for (none, if healthy)."""
        ready, _, _ = select.select(self.ports.sockets, [], [], grace_s)
        return [(self.ports.sockets.index(sock), frame) for sock in ready
                if (frame := self.ports.receive_frame(self.ports.sockets.index(sock))) is not None]


# -- the switch's state, by the names of docs/dataplane-atp.md ---------------------------------


def register(switch: ATPSwitch, name: str, index: int) -> int:
    return switch.control.register_read(f"ATPIngress.{name}", index)


def owner(switch: ATPSwitch, index: int) -> tuple[int, int]:
    return register(switch, "owner_app", index), register(switch, "owner_seq", index)


def aggregator_values(switch: ATPSwitch, index: int, k: int) -> np.ndarray:
    cells = [register(switch, f"value_{i:02d}", index) for i in range(k)]
    return np.array(cells, dtype=np.uint32).view(np.int32)


def ingress_events(switch: ATPSwitch) -> dict[str, int]:
    cells = switch.control.counter_read(programming.EVENT_COUNTER)
    return {name: packets for name, (packets, _bytes) in zip(params.INGRESS_EVENTS, cells) if packets}


def egress_packets(switch: ATPSwitch) -> list[int]:
    return [packets for packets, _bytes in switch.control.counter_read(programming.EGRESS_COUNTER)]


def reset(switch: ATPSwitch) -> None:
    """Fresh aggregators, counters and l2_table, as between two tests on one running switch."""
    control = switch.control
    control.registers_reset([name for name in control.schema.registers if name.startswith("ATPIngress.")])
    for counter in (programming.EVENT_COUNTER, programming.EGRESS_COUNTER):
        control.counter_reset(counter)
    control.table_clear(programming.L2_TABLE)
