"""The embedded switch's side of the runtime API: switches/remote_control.py's JSON lines
over a Unix stream socket, answered from the pipeline.

The server is driven by the switch loop's selector (no thread), so a request runs between
two packet bursts and sees a consistent switch state. Its ops are the SwitchControl
primitives plus ``ping`` (the launcher's readiness probe), ``stats`` (loss inside the
switch host) and ``schema``.
"""

from __future__ import annotations

import functools
import json
import logging
import selectors
import socket
from pathlib import Path
from typing import Any, Callable

from switches.embedded.program import PortProgram, ProgramView
from switches.remote_control import handle_request

log = logging.getLogger(__name__)

MAX_REQUEST_BYTES = 1 << 20


def pipeline_handlers(pipeline: PortProgram | ProgramView, stats: Callable[[], dict]) -> dict[str, Callable[..., Any]]:
    """The control ops answered from ``pipeline``, any protocol's program (a ``ProgramView``
    with a traffic manager): over the control socket, and in process (a simulated switch,
    switches/embedded/switchml/simulated.py)."""
    tm = pipeline.traffic_manager
    return {
        "ping": lambda: "pong",
        "stats": stats,
        "schema": lambda: pipeline.schema().to_json(),
        "table_num_entries": lambda table: len(pipeline.table(table).entries),
        "table_add": lambda table, action, keys, action_params: pipeline.table(table).add(action, keys, action_params),
        "table_set_default": lambda table, action, action_params: pipeline.table(table).set_default(action, action_params),
        "table_clear": lambda table: pipeline.table(table).clear(),
        "mc_mgrp_create": lambda group: tm.mc_mgrp_create(group),
        "mc_node_create": lambda rid, ports: tm.mc_node_create(rid, ports),
        "mc_node_associate": lambda group, node_handle: tm.mc_node_associate(group, node_handle),
        "register_read": lambda register: pipeline.register(register).read(),
        "register_write": lambda register, index, value: pipeline.register(register).write(index, value),
        "register_reset": lambda register: pipeline.register(register).reset(),
        "registers_reset": lambda registers: _reset_each(pipeline, registers),
        "counter_read": lambda counter: pipeline.counter(counter).read(),
        "counter_reset": lambda counter: pipeline.counter(counter).reset(),
    }


def _reset_each(pipeline: ProgramView, registers: list[str]) -> None:
    for register in registers:
        pipeline.register(register).reset()


class ControlServer:
    def __init__(self, pipeline: PortProgram, path: Path, selector: selectors.BaseSelector, stats: Callable[[], dict]) -> None:
        self._handlers = pipeline_handlers(pipeline, stats)
        self._selector = selector
        self._path = path
        self._buffers: dict[socket.socket, bytearray] = {}
        path.unlink(missing_ok=True)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(16)
        self._listener.setblocking(False)
        selector.register(self._listener, selectors.EVENT_READ, self._accept)
        log.info("control socket %s", path)

    def _accept(self) -> None:
        try:
            conn, _ = self._listener.accept()
        except BlockingIOError:
            return
        conn.setblocking(True)  # requests are read only when readable; replies are small
        self._buffers[conn] = bytearray()
        self._selector.register(conn, selectors.EVENT_READ, functools.partial(self._serve, conn))

    def _serve(self, conn: socket.socket) -> None:
        try:
            data = conn.recv(65536)
        except OSError:
            data = b""
        buffer = self._buffers[conn]
        buffer += data
        if not data or len(buffer) > MAX_REQUEST_BYTES:
            self._drop(conn)
            return
        while (end := buffer.find(b"\n")) >= 0:
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            response = json.dumps(handle_request(self._handlers, line)).encode() + b"\n"
            try:
                conn.sendall(response)
            except OSError:
                self._drop(conn)
                return

    def _drop(self, conn: socket.socket) -> None:
        self._selector.unregister(conn)
        del self._buffers[conn]
        conn.close()

    def close(self) -> None:
        for conn in list(self._buffers):
            self._drop(conn)
        self._selector.unregister(self._listener)
        self._listener.close()
        self._path.unlink(missing_ok=True)
