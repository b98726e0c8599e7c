"""EmbeddedControl: SwitchControl over the embedded switch's Unix control socket.

Every primitive is one JSON-lines round trip (see control_server). The switch's refusals
(unknown table, action or register, bad key, out-of-range index) come back as
ControlPlaneError with the switch's message, of the switch's kind (DuplicateEntryError,
TableFullError); a dead switch is a ControlPlaneError too.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any, Sequence

from switches.control import ERROR_KINDS, ControlPlaneError, MatchValue, ProgramSchema, SwitchControl

DEFAULT_TIMEOUT_S = 10.0


class EmbeddedControl(SwitchControl):
    def __init__(self, socket_path: Path, command_log: Path | None = None, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        super().__init__(command_log)
        self.socket_path = Path(socket_path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(str(self.socket_path))
        except OSError as exc:
            self._sock.close()
            raise ControlPlaneError(f"cannot connect to embedded switch at {self.socket_path}: {exc}") from exc
        self._reader = self._sock.makefile("rb")

    def call(self, op: str, **args: Any) -> Any:
        """One request; the switch's error message becomes a ControlPlaneError."""
        try:
            self._sock.sendall(json.dumps({"op": op, "args": args}).encode() + b"\n")
            line = self._reader.readline()
        except OSError as exc:
            raise ControlPlaneError(f"embedded switch at {self.socket_path}: {op} failed: {exc}") from exc
        if not line:
            raise ControlPlaneError(f"embedded switch at {self.socket_path} closed the connection during {op}")
        response = json.loads(line)
        if not response["ok"]:
            raise ERROR_KINDS.get(response.get("kind", ""), ControlPlaneError)(f"{op}: {response['error']}")
        return response["result"]

    def ping(self) -> None:
        self.call("ping")

    def stats(self) -> dict:
        """Receive-queue drops per port and refused sends inside the switch process."""
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

    def close(self) -> None:
        self._reader.close()
        self._sock.close()
