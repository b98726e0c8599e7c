"""ATP's program on the embedded target, as the simulated clock's switch (a ``SimulatedSwitch``,
switches/target.py) and as the switch process's program on a Mininet network (a
``PortProgram``, switches/embedded/program.py): ``ATPPipeline`` fed frames either way.

``ATPPipeline.process`` is free of I/O, so this is the reference pipeline itself: each frame
is processed as it arrives and every copy it returns leaves through the transmit function of
its port (the simulator's link, or the switch process's socket). ECN comes from the queue a
copy really joins where the switch knows it: the simulator hands each port's egress link's
depth (``egress_queue``), the drop-tail FIFO simulation/link.py serializes, and ATPEgress
marks a copy joining it at ``ecn_threshold`` packets or more. The switch process knows no
queue behind its sockets (the kernel's qdisc holds it), so there ATP never marks. Its control
plane is the embedded switch's handlers, called in process or over the control socket.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from switches.control import SwitchControl
from switches.embedded.atp.pipeline import ATPPipeline
from switches.embedded.control_server import pipeline_handlers
from switches.embedded.program import ProgramView
from switches.remote_control import InProcessControl
from switches.target import Transmit

FRAME_BUFFER_BYTES = 2048
"""The largest frame the switch process receives (an ATP packet of k = 256 is 1,100 bytes)."""


class ATPSwitch(ProgramView):
    """One embedded switch running ATP, its pool ``max_pool_size`` aggregators."""

    def __init__(self, *, k: int, max_pool_size: int, seed: int | None = None) -> None:
        self.pipeline = ATPPipeline(k, max_pool_size, self._queue_depth, seed)
        self._process = self.pipeline.process
        self._tables, self._registers, self._counters = self.pipeline._tables, self.pipeline._registers, self.pipeline._counters
        self.traffic_manager = self.pipeline.traffic_manager
        self.ports: dict[int, Transmit] = {}
        """Port -> its transmit function (the simulator's link, or the switch process's socket)."""
        self.frame = bytearray(FRAME_BUFFER_BYTES)
        """What the switch process receives each frame into (``PortProgram``)."""
        self.tx_errors = 0
        self._depth: dict[int, Callable[[], int]] = {}

    def connect(self, port: int, transmit: Transmit) -> None:
        self.ports[port] = transmit

    def egress_queue(self, port: int, depth: Callable[[], int]) -> None:
        """``depth()``: the frames queued on ``port``'s egress link now (the simulator's)."""
        self._depth[port] = depth

    def _queue_depth(self, port: int) -> int:
        depth = self._depth.get(port)
        return 0 if depth is None else depth()

    def receive(self, port: int, frame: bytes) -> None:
        """A frame that reached ``port`` (the simulator's ``SimulatedSwitch`` entry)."""
        transmit = self.ports
        for out_port, copy in self._process(port, frame):
            send = transmit.get(out_port)
            if send is not None:  # a port nothing is cabled to loses the copy, as on a real switch
                send(copy)

    def process(self, in_port: int, length: int) -> None:
        """The frame in ``frame[:length]``, received on ``in_port`` (the switch process's entry);
        a copy the kernel refuses is counted in ``tx_errors``."""
        for out_port, copy in self._process(in_port, bytes(self.frame[:length])):
            send = self.ports.get(out_port)
            if send is None:
                continue
            try:
                send(memoryview(copy))
            except OSError:
                self.tx_errors += 1

    def stats(self) -> dict:
        """What the control socket's ``stats`` reports: a simulated port loses nothing inside the switch."""
        return {"rx_drops": {str(port): 0 for port in self.ports}, "tx_errors": self.tx_errors}

    def control(self, command_log: Path | None = None) -> SwitchControl:
        return InProcessControl(pipeline_handlers(self.pipeline, self.stats), command_log)
