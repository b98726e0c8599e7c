"""The port I/O loop: one thread, epoll over every port socket, the control socket and the
delay line if there is one (readable when a held frame is due, delay_line.py).

Readiness of a port drains that socket until EAGAIN (bounded by ``BURST`` so one busy port
cannot starve the others or the control plane), receiving each frame as it was on the
wire (802.1Q tag included, see ports.py) into the program's single preallocated buffer. The
program is whichever protocol's the process was started with (program.py's ``PortProgram``).
Control requests are served between bursts by the same loop, so they never race the data
path and never block it for longer than one request.
"""

from __future__ import annotations

import functools
import logging
import selectors
import signal
import socket
from pathlib import Path
from typing import Callable, Mapping

from switches.embedded.control_server import ControlServer
from switches.embedded.delay_line import DelayLine
from switches.embedded.program import PortProgram
from switches.embedded.ports import WireFrameReceiver, open_port_socket, receive_drops

log = logging.getLogger(__name__)

BURST = 512
"""Frames taken from one port per readiness event."""
IDLE_WAKEUP_S = 0.2
"""How often an idle loop checks whether it was asked to stop."""


class EmbeddedSwitch:
    def __init__(self, pipeline: PortProgram, ports: Mapping[int, str], control_socket: Path,
                 delay_line: DelayLine | None = None) -> None:
        self.pipeline = pipeline
        self.delay_line = delay_line
        self._selector = selectors.EpollSelector()
        self._sockets: dict[int, socket.socket] = {}
        self._rx_drops: dict[int, int] = {port: 0 for port in ports}
        self._running = False
        try:
            if delay_line is not None:  # readable when its head frame is due
                self._selector.register(delay_line, selectors.EVENT_READ, delay_line.release_due)
            for port, ifname in ports.items():
                sock = open_port_socket(ifname)
                self._sockets[port] = sock
                pipeline.ports[port] = sock.send if delay_line is None else delay_line.wrap(sock.send)
                receiver = WireFrameReceiver(sock, pipeline.frame)
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
        log.info("switch running %s", type(self.pipeline).__name__)
        select = self._selector.select
        while self._running:
            for key, _events in select(IDLE_WAKEUP_S):
                key.data()
        log.info("switch stopping: %s", self.stats())

    def stop(self) -> None:
        self._running = False

    def close(self) -> None:
        if hasattr(self, "_control"):
            self._control.close()
        for sock in self._sockets.values():
            sock.close()
        self._selector.close()
        if self.delay_line is not None:
            self.delay_line.close()
