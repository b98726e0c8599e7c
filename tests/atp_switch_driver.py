"""One driver for ATP's switch, whatever the target: frames in, the copies that leave out, state
and counters through the control plane.

The behaviour cases (tests/test_atp_switch.py) and the differential test
(tests/test_atp_bmv2.py) are written once against ``ATPSwitchDriver``. Both targets are
programmed with the same calls (switches/bmv2/atp/programming.py through a SwitchControl:
``InProcessControl`` into the embedded ATPPipeline, Thrift into bmv2) and read alike, so
only ``process`` differs: a function call for the embedded pipeline here, real frames through
simple_switch in lock-step for bmv2 (tests/test_atp_bmv2.py's ``Bmv2ATPSwitch``). Ports are the
cases' own (0, 1, ...); a target's driver maps them to its own (``switch_port``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np

from atp_network import ps_endpoint, worker_endpoint
from protocol.atp import params
from switches.bmv2.atp import programming
from switches.atp.programming import result_group
from switches.control import SwitchControl
from switches.embedded.atp.pipeline import ATPPipeline
from switches.embedded.control_server import pipeline_handlers
from switches.remote_control import InProcessControl

Frames = list[tuple[int, bytes]]
INGRESS = "ATPIngress."


class ATPSwitchDriver(ABC):
    """An ATP switch of ``k`` values and ``pool_size`` aggregators, and its control plane."""

    def __init__(self, control: SwitchControl, k: int, pool_size: int) -> None:
        self.control = control
        self.k = k
        self.pool_size = pool_size

    @abstractmethod
    def process(self, in_port: int, frame: bytes) -> Frames:
        """The copies of ``frame``, received on ``in_port``, that leave: (port, bytes), by port,
        each port's in the order they left."""

    def switch_port(self, port: int) -> int:
        """The target's port number of a case's port."""
        return port

    # -- programming: the same calls on every target ---------------------------------------

    def program_job(self, app_id: int, worker_ports: Sequence[int], ps_port: int) -> None:
        """A job with tests/atp_network.py's addresses (worker_endpoint, ps_endpoint, result_group)."""
        workers = [programming.ATPWorker(self.switch_port(port), worker_endpoint(app_id, w).mac, worker_endpoint(app_id, w).ipv4)
                   for w, port in enumerate(worker_ports)]
        programming.program_job(self.control, programming.ATPJob(app_id, workers, self.switch_port(ps_port),
                                                                  ps_endpoint(app_id).ipv4, result_group(app_id)))

    def program_flood(self, ports: Sequence[int]) -> None:
        programming.program_flood(self.control, [self.switch_port(port) for port in ports])

    def program_host(self, mac: str, port: int) -> None:
        programming.program_host(self.control, mac, self.switch_port(port))

    def set_ecn_threshold(self, packets: int) -> None:
        programming.set_ecn_threshold(self.control, packets)

    # -- state ------------------------------------------------------------------------------

    def cell(self, register: str, index: int) -> int:
        """ATPIngress.<register>[index]."""
        return self.control.register_read(INGRESS + register, index)

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
    """The reference: switches/embedded/atp's pipeline, called directly."""

    def __init__(self, k: int, pool_size: int, pipeline: ATPPipeline | None = None) -> None:
        self.pipeline = pipeline if pipeline is not None else ATPPipeline(k, pool_size)
        super().__init__(InProcessControl(pipeline_handlers(self.pipeline, dict)), k, pool_size)

    def process(self, in_port: int, frame: bytes) -> Frames:
        return sorted(self.pipeline.process(in_port, frame), key=lambda copy: copy[0])
