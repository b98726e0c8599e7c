"""``SwitchControl`` for bmv2: each primitive is one call of p4-utils' ``SimpleSwitchThriftAPI``.

p4-utils' public methods catch every error, print it and return None (they were written
for an interactive CLI). A testbed must not carry on after the switch refused an entry,
so this module calls the undecorated functions (``__wrapped__``, kept by functools.wraps)
and turns p4-utils' and Thrift's exceptions into ``ControlPlaneError``; what they print
goes to the debug log instead of the terminal.

p4utils (and bmv2's Thrift bindings it imports) exist only where bmv2 is installed, so
they are imported when a ``Bmv2Control`` is created, never when this module is imported.
"""

from __future__ import annotations

import contextlib
import io
import logging
from pathlib import Path
from typing import Any, Sequence

from switches.control import ControlPlaneError, MatchValue, SwitchControl, parse_value

log = logging.getLogger(__name__)


def _as_api_argument(value: MatchValue) -> str:
    """p4-utils wants strings; a decimal integer is valid for a key or parameter of any width."""
    return str(parse_value(value))


class Bmv2Control(SwitchControl):
    """Control plane of one running simple_switch, over its Thrift port."""

    def __init__(
        self,
        thrift_port: int,
        json_path: Path | None = None,
        command_log: Path | None = None,
        thrift_ip: str = "127.0.0.1",
    ) -> None:
        """Connect to simple_switch; ``json_path`` avoids fetching the program over Thrift."""
        super().__init__(command_log)
        from p4utils.utils import thrift_API
        from p4utils.utils.sswitch_thrift_API import SimpleSwitchThriftAPI
        from thrift.Thrift import TException

        self._errors: tuple[type[BaseException], ...] = (thrift_API.UIn_Error, TException)
        self._res_type = thrift_API.ResType
        self._where = f"simple_switch at {thrift_ip}:{thrift_port}"
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                self._api = SimpleSwitchThriftAPI(
                    thrift_port, thrift_ip=thrift_ip, json_path=None if json_path is None else str(json_path)
                )
        except (*self._errors, SystemExit) as error:
            # bmv2's bmpy_utils.thrift_connect calls sys.exit(1) when nothing answers.
            raise ControlPlaneError(f"cannot connect to {self._where}: {printed.getvalue().strip()} {error!r}") from error

    def _call(self, method: str, *args: Any) -> Any:
        """Run one p4-utils method with its exceptions intact and its printing logged."""
        function = getattr(type(self._api), method)
        function = getattr(function, "__wrapped__", function)
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                return function(self._api, *args)
        except self._errors as error:
            raise ControlPlaneError(f"{self._where}: {method}{args} failed: {error!r} {error}") from error
        finally:
            if printed.getvalue():
                log.debug("p4utils %s: %s", method, printed.getvalue().strip())

    def _table_add(
        self, table: str, action: str, keys: Sequence[MatchValue], action_params: Sequence[MatchValue]
    ) -> int:
        handle = self._call(
            "table_add", table, action, [_as_api_argument(k) for k in keys], [_as_api_argument(p) for p in action_params]
        )
        if not isinstance(handle, int):  # p4-utils returns bmv2's answer as is when it is not a handle
            raise ControlPlaneError(f"{self._where}: table_add {table} {action} returned {handle!r}, not a handle")
        return handle

    def _table_set_default(self, table: str, action: str, action_params: Sequence[MatchValue]) -> None:
        self._call("table_set_default", table, action, [_as_api_argument(p) for p in action_params])

    def _table_clear(self, table: str) -> None:
        self._call("table_clear", table)

    def _mc_mgrp_create(self, group: int) -> None:
        self._call("mc_mgrp_create", group)

    def _mc_node_create(self, rid: int, ports: Sequence[int]) -> int:
        return int(self._call("mc_node_create", rid, list(ports)))

    def _mc_node_associate(self, group: int, node_handle: int) -> None:
        self._call("mc_node_associate", group, node_handle)

    def _register_read(self, register: str) -> list[int]:
        return list(self._call("register_read", register))

    def _register_write(self, register: str, index: int, value: int) -> None:
        self._call("register_write", register, index, value)

    def _register_reset(self, register: str) -> None:
        self._call("register_reset", register)

    def _counter_read(self, counter: str) -> list[tuple[int, int]]:
        # p4-utils reads one cell per call and answers (bytes, packets); the interface
        # wants (packets, bytes) for the whole array, whose size p4-utils knows from the JSON.
        size = self._call("get_res", "counter", counter, self._res_type.counter_array).size
        cells = [self._call("counter_read", counter, index) for index in range(size)]
        return [(packets, byte_count) for byte_count, packets in cells]

    def _counter_reset(self, counter: str) -> None:
        self._call("counter_reset", counter)

    def close(self) -> None:
        """Close the Thrift socket p4-utils opened; it offers no close() of its own.

        bmpy_utils builds every client on one transport, reachable as the protocol's
        ``trans``; the lookups tolerate a different Thrift layout rather than fail at exit.
        """
        transport = getattr(getattr(self._api.client, "_iprot", None), "trans", None)
        if transport is not None:
            transport.close()
