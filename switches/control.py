"""The one control-plane interface that drives every switch target.

The vocabulary is bmv2's runtime CLI (simple_switch_CLI / p4-utils' Thrift API): tables,
multicast groups and nodes, registers, counters, each named by its fully qualified P4
name (``SwitchMLIngress.worker_table``). The embedded software switch uses exactly the
same names, so one piece of code (``switches/programming.py``) programs both targets, and
every call is also logged as the simple_switch_CLI command a user could type by hand.

A target implements the ``_``-prefixed primitives; the public methods log and validate.
"""

from __future__ import annotations

import ipaddress
import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

MatchValue = int | str
"""A match key or action parameter: an int, or an IPv4 ('10.0.0.1') or MAC string."""


class ControlPlaneError(RuntimeError):
    """A control-plane operation the target refused (unknown table, bad key, ...)."""


def parse_value(value: MatchValue) -> int:
    """An int, a dotted IPv4 address or a colon-separated MAC address, as an integer."""
    if isinstance(value, int):
        return value
    text = value.strip()
    if text.count(":") == 5:
        return int(text.replace(":", ""), 16)
    if text.count(".") == 3:
        return int(ipaddress.IPv4Address(text))
    return int(text, 0)


def cli_command(verb: str, *args: object) -> str:
    """One simple_switch_CLI line: ``table_add t a 1 10.0.0.1 => 0 8``."""
    return " ".join([verb, *(str(a) for a in args)])


class SwitchControl(ABC):
    """Control-plane operations of one running switch, the same for every target."""

    def __init__(self, command_log: Path | None = None) -> None:
        self._command_log = command_log

    # -- what a target implements ------------------------------------------------------

    @abstractmethod
    def _table_add(self, table: str, action: str, keys: Sequence[MatchValue], action_params: Sequence[MatchValue]) -> int: ...

    @abstractmethod
    def _table_set_default(self, table: str, action: str, action_params: Sequence[MatchValue]) -> None: ...

    @abstractmethod
    def _table_clear(self, table: str) -> None: ...

    @abstractmethod
    def _mc_mgrp_create(self, group: int) -> None: ...

    @abstractmethod
    def _mc_node_create(self, rid: int, ports: Sequence[int]) -> int: ...

    @abstractmethod
    def _mc_node_associate(self, group: int, node_handle: int) -> None: ...

    @abstractmethod
    def _register_read(self, register: str) -> list[int]: ...

    @abstractmethod
    def _register_write(self, register: str, index: int, value: int) -> None: ...

    @abstractmethod
    def _register_reset(self, register: str) -> None: ...

    @abstractmethod
    def _counter_read(self, counter: str) -> list[tuple[int, int]]: ...

    @abstractmethod
    def _counter_reset(self, counter: str) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Release the connection to the switch (the switch keeps running)."""

    # -- the interface -----------------------------------------------------------------

    def _record(self, verb: str, *args: object) -> None:
        line = cli_command(verb, *args)
        log.debug("control: %s", line)
        if self._command_log is not None:
            with self._command_log.open("a") as f:
                f.write(line + "\n")

    def table_add(self, table: str, action: str, keys: Sequence[MatchValue], action_params: Sequence[MatchValue] = ()) -> int:
        """Add an exact-match entry; returns its handle."""
        self._record("table_add", table, action, *keys, "=>", *action_params)
        return self._table_add(table, action, keys, action_params)

    def table_set_default(self, table: str, action: str, action_params: Sequence[MatchValue] = ()) -> None:
        self._record("table_set_default", table, action, *action_params)
        self._table_set_default(table, action, action_params)

    def table_clear(self, table: str) -> None:
        self._record("table_clear", table)
        self._table_clear(table)

    def mc_mgrp_create(self, group: int) -> None:
        self._record("mc_mgrp_create", group)
        self._mc_mgrp_create(group)

    def mc_node_create(self, rid: int, ports: Sequence[int]) -> int:
        """Create a multicast node (replication id + ports); returns its handle."""
        self._record("mc_node_create", rid, *ports)
        return self._mc_node_create(rid, ports)

    def mc_node_associate(self, group: int, node_handle: int) -> None:
        self._record("mc_node_associate", group, node_handle)
        self._mc_node_associate(group, node_handle)

    def register_read(self, register: str, index: int | None = None) -> list[int] | int:
        """One cell (``index`` given) or the whole register array."""
        self._record("register_read", register, *([] if index is None else [index]))
        cells = self._register_read(register)
        return cells if index is None else cells[index]

    def register_write(self, register: str, index: int, value: int) -> None:
        self._record("register_write", register, index, value)
        self._register_write(register, index, value)

    def register_reset(self, register: str) -> None:
        self._record("register_reset", register)
        self._register_reset(register)

    def counter_read(self, counter: str) -> list[tuple[int, int]]:
        """(packets, bytes) for every cell of a counter array."""
        self._record("counter_read", counter)
        return self._counter_read(counter)

    def counter_reset(self, counter: str) -> None:
        self._record("counter_reset", counter)
        self._counter_reset(counter)

    def __enter__(self) -> "SwitchControl":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
