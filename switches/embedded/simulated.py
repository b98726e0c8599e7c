"""The embedded switch as a ``SimulatedSwitch`` (switches/target.py): its pipeline, fed
frames by the simulator instead of by AF_PACKET sockets.

``SwitchMLPipeline.process`` is already free of I/O (pipeline.py), so the simulated switch
is the emulated one's exact code: each frame is copied into the pipeline's buffer and
processed, and leaves through the transmit function the simulator connected to its port.
Its control plane is the control socket's handlers (control_server.py), called in process.
"""

from __future__ import annotations

from pathlib import Path

from switches.control import SwitchControl
from switches.embedded.control_server import pipeline_handlers
from switches.embedded.pipeline import SwitchMLPipeline
from switches.remote_control import InProcessControl
from switches.target import Transmit


class PipelineSwitch:
    """One embedded switch in a simulation."""

    def __init__(self, *, k: int, max_pool_size: int, seed: int | None = None) -> None:
        self.pipeline = SwitchMLPipeline(k, max_pool_size, seed)
        self._frame = self.pipeline.packet.frame
        self._process = self.pipeline.process

    def connect(self, port: int, transmit: Transmit) -> None:
        self.pipeline.ports[port] = transmit

    def receive(self, port: int, frame: bytes) -> None:
        length = len(frame)
        self._frame[:length] = frame
        self._process(port, length)

    def stats(self) -> dict:
        """What the control socket's ``stats`` reports: a simulated port loses nothing inside the switch."""
        return {"rx_drops": {str(port): 0 for port in self.pipeline.ports}, "tx_errors": self.pipeline.tx_errors}

    def control(self, command_log: Path | None = None) -> SwitchControl:
        return InProcessControl(pipeline_handlers(self.pipeline, self.stats), command_log)
