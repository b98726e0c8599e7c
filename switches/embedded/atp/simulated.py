"""ATP's program on the embedded target as a ``SimulatedSwitch`` (switches/target.py): the
simulated clock's switch for an ATP job, ``ATPPipeline`` fed frames by the simulator.

``ATPPipeline.process`` is free of I/O, so this is the reference pipeline itself: each frame
is processed at its arrival and every copy it returns leaves through the transmit function
the simulator connected to its port. ECN comes from the queue a copy really joins: the
simulator hands each port's egress link's depth (``egress_queue``), the drop-tail FIFO
simulation/link.py serializes, and ATPEgress marks a copy joining it at ``ecn_threshold``
packets or more. Its control plane is the embedded switch's handlers, called in process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from switches.control import SwitchControl
from switches.embedded.atp.pipeline import ATPPipeline
from switches.embedded.control_server import pipeline_handlers
from switches.remote_control import InProcessControl
from switches.target import Transmit


class ATPSwitch:
    """One embedded switch running ATP in a simulation, its pool ``max_pool_size`` aggregators."""

    def __init__(self, *, k: int, max_pool_size: int, seed: int | None = None) -> None:
        self.pipeline = ATPPipeline(k, max_pool_size, self._queue_depth)
        self._process = self.pipeline.process
        self._transmit: dict[int, Transmit] = {}
        self._depth: dict[int, Callable[[], int]] = {}

    def connect(self, port: int, transmit: Transmit) -> None:
        self._transmit[port] = transmit

    def egress_queue(self, port: int, depth: Callable[[], int]) -> None:
        """``depth()``: the frames queued on ``port``'s egress link now (the simulator's)."""
        self._depth[port] = depth

    def _queue_depth(self, port: int) -> int:
        depth = self._depth.get(port)
        return 0 if depth is None else depth()

    def receive(self, port: int, frame: bytes) -> None:
        transmit = self._transmit
        for out_port, copy in self._process(port, frame):
            send = transmit.get(out_port)
            if send is not None:  # a port nothing is cabled to loses the copy, as on a real switch
                send(copy)

    def stats(self) -> dict:
        """What the control socket's ``stats`` reports: a simulated port loses nothing inside the switch."""
        return {"rx_drops": {str(port): 0 for port in self._transmit}, "tx_errors": 0}

    def control(self, command_log: Path | None = None) -> SwitchControl:
        return InProcessControl(pipeline_handlers(self.pipeline, self.stats), command_log)
