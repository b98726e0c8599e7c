"""The port I/O loop: one thread, epoll over every port socket and the control socket.

Readiness of a port drains that socket until EAGAIN (bounded by ``BURST`` so one busy port
cannot starve the others or the control plane), receiving each frame as it was on the
wire (802.1Q tag included, see ports.py) into the pipeline's single preallocated buffer.
Control requests are served between bursts by the same loop, so they never race the data
path and never block it for longer than one request.
"""

from __future__ import annotations

import functools
import logging
import selectors
import signal
import socket
import time
from pathlib import Path
from typing import Callable, Mapping

from switches.embedded.control_server import ControlServer
from switches.embedded.delay_line import DelayLine
from switches.embedded.switchml.pipeline import SwitchMLPipeline
from switches.embedded.ports import WireFrameReceiver, open_port_socket, receive_drops

log = logging.getLogger(__name__)

BURST = 512
"""Frames taken from one port per readiness event."""
IDLE_WAKEUP_S = 0.2
"""How often an idle loop checks whether it was asked to stop."""


class EmbeddedSwitch:
    def __init__(self, pipeline: SwitchMLPipeline, ports: Mapping[int, str], control_socket: Path,
                 delay_line: DelayLine | None = None) -> None:
        self.pipeline = pipeline
        self.delay_line = delay_line
        self._selector = selectors.EpollSelector()
        self._sockets: dict[int, socket.socket] = {}
        self._rx_drops: dict[int, int] = {port: 0 for port in ports}
        self._running = False
        try:
            for port, ifname in ports.items():
                sock = open_port_socket(ifname)
                self._sockets[port] = sock
                pipeline.ports[port] = sock.send if delay_line is None else delay_line.wrap(sock.send)
                receiver = WireFrameReceiver(sock, pipeline.packet.frame)
                self._selector.register(sock, selectors.EVENT_READ, functools.partial(self._drain, port, receiver.receive))
                log.info("port %d = %s", port, ifname)
            self._control = ControlServer(pipeline, control_socket, self._selector, self.stats)
        except BaseException:
            self.close()
            raise

    def stats(self) -> dict:
        """Loss inside the switch host: receive-queue overflows per port, refused sends."""
        for port, sock in self._sockets.items():
            self._rx_drops[port] += receive_drops(sock)
        delayed_errors = 0 if self.delay_line is None else self.delay_line.tx_errors
        return {"rx_drops": {str(p): n for p, n in self._rx_drops.items()}, "tx_errors": self.pipeline.tx_errors + delayed_errors}

    def _drain(self, port: int, receive: Callable[[], int | None]) -> None:
        process = self.pipeline.process
        for _ in range(BURST):
            length = receive()
            if length is None:
                return
            process(port, length)

    def run(self) -> None:
        """Forward until SIGTERM/SIGINT or stop()."""
        self._running = True
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: self.stop())
        log.info("switch running: k=%d, pool=%d", self.pipeline.ingress.k, self.pipeline.ingress.max_pool_size)
        select = self._selector.select
        delay_line = self.delay_line
        if delay_line is None:
            while self._running:
                for key, _events in select(IDLE_WAKEUP_S):
                    key.data()
        else:  # wake up in time for the next delayed frame, too
            clock = time.monotonic
            while self._running:
                due_in = delay_line.due_in(clock())
                for key, _events in select(IDLE_WAKEUP_S if due_in is None else min(due_in, IDLE_WAKEUP_S)):
                    key.data()
                delay_line.release(clock())
        log.info("switch stopping: %s", self.stats())

    def stop(self) -> None:
        self._running = False

    def close(self) -> None:
        if hasattr(self, "_control"):
            self._control.close()
        for sock in self._sockets.values():
            sock.close()
        self._selector.close()
