"""One driver for ATP's switch, whatever the target: frames in, the copies that leave out, state
and counters through the control plane.

The behaviour cases (tests/atp_switch_cases.py) and the differential test
(tests/atp_differential.py) are written once against ``ATPSwitchDriver``. Every target is
programmed with the same calls (switches/atp/programming.py through its SwitchControl:
``InProcessControl`` into the embedded ATPPipeline, Thrift into bmv2, the maps of the eBPF
program) and read alike, so only ``process`` differs: a function call for the embedded
pipeline here; real frames on a test bed's veths for bmv2 (``Bmv2ATPSwitch`` in
tests/test_atp_bmv2.py, in lock-step with probes) and for eBPF (``EbpfATPSwitch`` in
tests/test_atp_ebpf.py, until the program's counters account for the frame). Each target's
driver lives with its tests, so running one target's tests needs no other's harness. Ports are
the cases' own (0, 1, ...); a target's driver maps them to its own (``switch_port``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from atp_network import ps_endpoint, worker_endpoint
from protocol.atp import params
from switches.atp import programming
from switches.control import SwitchControl
from switches.embedded.atp.egress import QueueDepth, no_queue
from switches.embedded.atp.pipeline import ATPPipeline
from switches.embedded.control_server import pipeline_handlers
from switches.remote_control import InProcessControl

Copies = list[tuple[int, bytes]]


class ATPSwitchDriver(ABC):
    """An ATP switch of ``k`` values and ``pool_size`` aggregators, and its control plane."""

    def __init__(self, control: SwitchControl, k: int, pool_size: int) -> None:
        self.control = control
        self.k = k
        self.pool_size = pool_size

    @abstractmethod
    def process(self, in_port: int, frame: bytes) -> Copies:
        """The copies of ``frame``, received on ``in_port``, that leave: (port, bytes), by port,
        each port's in the order they left."""

    def process_lossy(self, in_port: int, frame: bytes, drops: tuple[float, float], egress_copies: int | None) -> Copies:
        """``process`` with the drop simulator at ``drops`` (ingress, egress probabilities), off
        again after. ``egress_copies``: the copies its egress will count, sent or dropped (the
        reference's count; None for the reference), for a target that cannot tell otherwise
        when its egress is done with the frame (bmv2)."""
        self.set_drop_probability(*drops)
        try:
            return self.process(in_port, frame)
        finally:
            self.set_drop_probability(0.0, 0.0)

    def switch_port(self, port: int) -> int:
        """The target's port number of a case's port."""
        return port

    # -- programming: the same calls on every target ---------------------------------------

    def program_job(self, app_id: int, worker_ports: Sequence[int], ps_port: int) -> None:
        """A job with tests/atp_network.py's addresses (worker_endpoint, ps_endpoint)."""
        workers = [programming.Host(self.switch_port(port), address.mac, address.ipv4, address.udp_port)
                   for port, address in ((port, worker_endpoint(app_id, w)) for w, port in enumerate(worker_ports))]
        ps = ps_endpoint(app_id)
        programming.program_job(self.control, app_id, workers, programming.Host(self.switch_port(ps_port), ps.mac, ps.ipv4))

    def program_flood(self, ports: Sequence[int]) -> None:
        programming.program_flood(self.control, [self.switch_port(port) for port in ports])

    def program_host(self, mac: str, port: int) -> None:
        programming.program_host(self.control, mac, self.switch_port(port))

    def set_ecn_threshold(self, packets: int) -> None:
        programming.set_ecn_threshold(self.control, packets)

    def set_drop_probability(self, ingress: float, egress: float) -> None:
        programming.DROP_SIMULATOR.set_probability(self.control, ingress, egress)

    def reset(self) -> None:
        """Fresh aggregators and counters, and no known host: as between two tests on one
        running switch (its jobs and flood group stay)."""
        programming.reset_pool(self.control)
        self.control.table_clear(programming.L2_TABLE)

    # -- state ------------------------------------------------------------------------------

    def cell(self, register: str, index: int) -> int:
        """ATPIngress.<register>[index]."""
        return self.control.register_read(f"{programming.INGRESS}.{register}", index)

    def owner(self, index: int) -> tuple[int, int]:
        return self.cell("owner_app", index), self.cell("owner_seq", index)

    def values(self, index: int) -> np.ndarray:
        """The k value registers of one aggregator, as int32."""
        return np.array([self.cell(f"value_{i:02d}", index) for i in range(self.k)], dtype=np.uint32).view(np.int32)

    def counter_cells(self) -> dict[str, tuple[int, int]]:
        """(packets, bytes) of every ingress and egress event."""
        return programming.read_counters(self.control)

    def counters(self) -> dict[str, int]:
        """Packets of every ingress and egress event."""
        return {name: packets for name, (packets, _) in self.counter_cells().items()}

    def events(self) -> dict[str, int]:
        """The ingress events that happened, with their packet counts."""
        counted = self.counters()
        return {name: counted[name] for name in params.INGRESS_EVENTS if counted[name]}

    def egress_packets(self) -> list[int]:
        counted = self.counters()
        return [counted[name] for name in params.EGRESS_EVENTS]


class EmbeddedATPSwitch(ATPSwitchDriver):
    """The reference: switches/embedded/atp's pipeline, called directly, its egress marking
    ECN from the queue depth it is given (none by default)."""

    def __init__(self, k: int, pool_size: int, queue_depth: QueueDepth = no_queue) -> None:
        self.pipeline = ATPPipeline(k, pool_size, queue_depth)
        super().__init__(InProcessControl(pipeline_handlers(self.pipeline, dict)), k, pool_size)

    def process(self, in_port: int, frame: bytes) -> Copies:
        return sorted(self.pipeline.process(in_port, frame), key=lambda copy: copy[0])
