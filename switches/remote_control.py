"""A switch's control plane over a Unix socket, whatever the target: JSON lines, one
request and one response per SwitchControl primitive.

A request is one line ``{"op": ..., "args": {...}}`` and gets one line back, ``{"ok": true,
"result": ...}`` or ``{"ok": false, "error": "...", "kind": "..."}``. Ops are the
SwitchControl primitives under their own names (``PRIMITIVES``) plus ``ping`` (a readiness
probe), ``schema`` (the program's tables, registers and counters, which the client checks
every call against) and, where the switch has them, ``stats`` (loss inside its process).
Two servers speak it: the embedded switch's process (switches/embedded/control_server.py)
and, for a switch of any target on a cluster's other server, switches/agent.py, which
serves that target's own control plane (``primitive_handlers``). ``SocketControl`` is the
client of both. The switch's refusals (unknown table, action or register, bad key,
out-of-range index) come back as ControlPlaneError with the switch's message, of the
switch's kind (DuplicateEntryError, TableFullError); a dead switch is a ControlPlaneError too.
"""

from __future__ import annotations

import json
import logging
import socket
from abc import abstractmethod
from pathlib import Path
from typing import Any, Callable, Sequence

from switches.control import ERROR_KINDS, ControlPlaneError, MatchValue, ProgramSchema, SwitchControl

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 10.0
PRIMITIVES = ("table_num_entries", "table_add", "table_set_default", "table_clear", "mc_mgrp_create", "mc_node_create",
              "mc_node_associate", "register_read", "register_write", "register_reset", "registers_reset",
              "counter_read", "counter_reset")
"""The SwitchControl primitives, served under their own names."""

Handlers = dict[str, Callable[..., Any]]


def primitive_handlers(control: SwitchControl) -> Handlers:
    """The ops that serve a target's own control plane (``SwitchControl.primitives``): the
    client side logged and checked each call already, so the server runs the primitive."""
    served: Handlers = dict(control.primitives(PRIMITIVES))
    served["ping"] = lambda: "pong"
    served["schema"] = lambda: control.schema.to_json()
    stats = getattr(control, "stats", None)
    if callable(stats):
        served["stats"] = stats
    return served


def handle_request(handlers: Handlers, line: bytes) -> dict:
    """Run one request line; every failure becomes an error response, never a crash."""
    try:
        request = json.loads(line)
        op, args = request["op"], request.get("args", {})
        if op not in handlers:
            raise ControlPlaneError(f"unknown control operation {op!r}")
        return {"ok": True, "result": handlers[op](**args)}
    except ControlPlaneError as exc:
        return {"ok": False, "error": str(exc), "kind": type(exc).__name__}
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("bad control request %r: %s", line[:200], exc)
        return {"ok": False, "error": f"bad request: {type(exc).__name__}: {exc}"}


class CallControl(SwitchControl):
    """SwitchControl whose every primitive is one ``call(op, **args)`` of the ops above: the
    client side of a switch's handlers, wherever they run."""

    @abstractmethod
    def call(self, op: str, **args: Any) -> Any:
        """Run one op; the switch's refusal is a ControlPlaneError of the switch's kind."""

    def ping(self) -> None:
        self.call("ping")

    def stats(self) -> dict:
        """Loss inside the switch's process (the embedded switch: receive-queue drops per
        port and refused sends), where its server has it."""
        return self.call("stats")

    def _load_schema(self) -> ProgramSchema:
        return ProgramSchema.from_json(self.call("schema"))

    def _table_num_entries(self, table: str) -> int:
        return self.call("table_num_entries", table=table)

    def _table_add(self, table: str, action: str, keys: Sequence[MatchValue], action_params: Sequence[MatchValue]) -> int:
        return self.call("table_add", table=table, action=action, keys=list(keys), action_params=list(action_params))

    def _table_set_default(self, table: str, action: str, action_params: Sequence[MatchValue]) -> None:
        self.call("table_set_default", table=table, action=action, action_params=list(action_params))

    def _table_clear(self, table: str) -> None:
        self.call("table_clear", table=table)

    def _mc_mgrp_create(self, group: int) -> None:
        self.call("mc_mgrp_create", group=group)

    def _mc_node_create(self, rid: int, ports: Sequence[int]) -> int:
        return self.call("mc_node_create", rid=rid, ports=list(ports))

    def _mc_node_associate(self, group: int, node_handle: int) -> None:
        self.call("mc_node_associate", group=group, node_handle=node_handle)

    def _register_read(self, register: str) -> list[int]:
        return self.call("register_read", register=register)

    def _register_write(self, register: str, index: int, value: int) -> None:
        self.call("register_write", register=register, index=index, value=value)

    def _register_reset(self, register: str) -> None:
        self.call("register_reset", register=register)

    def _registers_reset(self, registers: Sequence[str]) -> None:
        self.call("registers_reset", registers=list(registers))

    def _counter_read(self, counter: str) -> list[tuple[int, int]]:
        return [tuple(cell) for cell in self.call("counter_read", counter=counter)]

    def _counter_reset(self, counter: str) -> None:
        self.call("counter_reset", counter=counter)


class SocketControl(CallControl):
    """SwitchControl through a control socket: every primitive one round trip."""

    def __init__(self, socket_path: Path, command_log: Path | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(command_log)
        self.socket_path = Path(socket_path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(str(self.socket_path))
        except OSError as exc:
            self._sock.close()
            raise ControlPlaneError(f"cannot connect to the switch's control socket {self.socket_path}: {exc}") from exc
        self._reader = self._sock.makefile("rb")

    def call(self, op: str, **args: Any) -> Any:
        """One request; the switch's error message becomes a ControlPlaneError."""
        try:
            self._sock.sendall(json.dumps({"op": op, "args": args}).encode() + b"\n")
            line = self._reader.readline()
        except OSError as exc:
            raise ControlPlaneError(f"switch control at {self.socket_path}: {op} failed: {exc}") from exc
        if not line:
            raise ControlPlaneError(f"switch control at {self.socket_path} closed the connection during {op}")
        response = json.loads(line)
        if not response["ok"]:
            raise ERROR_KINDS.get(response.get("kind", ""), ControlPlaneError)(f"{op}: {response['error']}")
        return response["result"]

    def close(self) -> None:
        self._reader.close()
        self._sock.close()


class InProcessControl(CallControl):
    """SwitchControl straight into a switch's handlers in this process (a simulated switch,
    simulation/): the same ops and checks as over a socket, without one."""

    def __init__(self, handlers: Handlers, command_log: Path | None = None) -> None:
        super().__init__(command_log)
        self._handlers = handlers

    def call(self, op: str, **args: Any) -> Any:
        if op not in self._handlers:
            raise ControlPlaneError(f"unknown control operation {op!r}")
        return self._handlers[op](**args)

    def close(self) -> None:
        """Nothing to release: the switch lives as long as its simulation."""
