"""The one control-plane interface that drives every switch target.

The vocabulary is bmv2's runtime CLI (simple_switch_CLI / p4-utils' Thrift API): tables,
multicast groups and nodes, registers, counters, each named by its fully qualified P4
name (``SwitchMLIngress.worker_table``). The embedded and eBPF switches use exactly the
same names, so one piece of code (``switches/switchml/programming.py``) programs every target, and
every call is also logged as the simple_switch_CLI command a user could type by hand.

A target implements the ``_``-prefixed primitives and describes its program's tables,
registers and counters as a ``ProgramSchema``; the public methods log the call and check it
against that schema before the target sees it. Every target therefore refuses the same
mistakes with the same ``ControlPlaneError`` and the same words (bmv2 left alone would store
port 512 as port 0, or take a MAC it cannot parse for a crash); the few errors that depend
on the switch's state (a duplicate entry, a group that exists or does not) are raised by
the target with the messages made here.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

log = logging.getLogger(__name__)

MatchValue = int | str
"""A match key or action parameter: an int, or an IPv4 ('10.0.0.1') or MAC string."""


MAX_MC_GROUP = 0xFFFF
MAX_MC_RID = 0xFFFF
MAX_PORT = (1 << 9) - 1
"""bmv2's (and v1model's) bit<9> port numbers."""


class ControlPlaneError(RuntimeError):
    """A control-plane operation the target refused (unknown table, bad key, ...)."""


class DuplicateEntryError(ControlPlaneError):
    """table_add of a key the table already holds (a learning controller ignores these)."""


class TableFullError(ControlPlaneError):
    """table_add to a table that holds its size already (learning counts EV_L2_NOT_LEARNED)."""


ERROR_KINDS: Mapping[str, type[ControlPlaneError]] = {
    kind.__name__: kind for kind in (ControlPlaneError, DuplicateEntryError, TableFullError)
}
"""The refusals by name, for a target whose control plane answers over a socket (the
embedded switch): its client raises the same kind as the switch did."""


def duplicate_entry_error(table: str, keys: Sequence[MatchValue]) -> DuplicateEntryError:
    return DuplicateEntryError(f"{table}: duplicate entry for key {list(keys)}")


def table_full_error(table: str, size: int) -> TableFullError:
    return TableFullError(f"{table}: table full ({size} entries)")


def mc_group_exists_error(group: int) -> ControlPlaneError:
    return ControlPlaneError(f"multicast group {group} already exists")


def mc_group_missing_error(group: int) -> ControlPlaneError:
    return ControlPlaneError(f"multicast group {group} does not exist")


def mc_node_missing_error(node_handle: int) -> ControlPlaneError:
    return ControlPlaneError(f"multicast node {node_handle} does not exist")


def check_mc_group(group: int) -> None:
    if not 0 < group <= MAX_MC_GROUP:
        raise ControlPlaneError(f"multicast group {group} out of range 1..{MAX_MC_GROUP}")


def check_mc_node(rid: int, ports: Sequence[int]) -> None:
    if not 0 <= rid <= MAX_MC_RID:
        raise ControlPlaneError(f"multicast rid {rid} out of range 0..{MAX_MC_RID}")
    bad = [p for p in ports if not isinstance(p, int) or not 0 <= p <= MAX_PORT]
    if bad:
        raise ControlPlaneError(f"multicast node ports out of range 0..{MAX_PORT}: {bad}")


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


@dataclass(frozen=True)
class Field:
    """A match key or action parameter: its P4 name and width in bits."""

    name: str
    bits: int


def encode_fields(fields: Sequence[Field], values: Sequence[MatchValue], what: str) -> tuple[int, ...]:
    """Values as integers, each checked to parse and to fit its field's width."""
    if len(values) != len(fields):
        names = ", ".join(f.name for f in fields)
        raise ControlPlaneError(f"{what} takes {len(fields)} value(s) ({names}), got {len(values)}")
    encoded = []
    for spec, value in zip(fields, values):
        try:
            number = parse_value(value)
        except ValueError as exc:
            raise ControlPlaneError(f"{what}: {spec.name}: cannot parse {value!r}") from exc
        if not 0 <= number < 1 << spec.bits:
            raise ControlPlaneError(f"{what}: {spec.name}={value!r} does not fit bit<{spec.bits}>")
        encoded.append(number)
    return tuple(encoded)


def check_register_cell(name: str, size: int, bits: int, index: int, value: int = 0) -> None:
    if not 0 <= index < size:
        raise ControlPlaneError(f"{name}: index {index} out of range 0..{size - 1}")
    if not 0 <= value < 1 << bits:
        raise ControlPlaneError(f"{name}: value {value} does not fit bit<{bits}>")


def lookup(names: Mapping[str, Any], name: str, kind: str, where: str = "") -> Any:
    """``names[name]``, or the error every target gives for an unknown table, action, ..."""
    try:
        return names[name]
    except KeyError:
        raise ControlPlaneError(f"{where}unknown {kind} {name!r} (known: {', '.join(sorted(names))})") from None


@dataclass(frozen=True)
class TableSchema:
    keys: tuple[Field, ...]
    actions: Mapping[str, tuple[Field, ...]]
    """Action name (unqualified, as the control plane says it) -> its parameters."""
    size: int
    """Entries it holds at most (the P4 ``size``): one more is refused (``table_full_error``)."""


@dataclass(frozen=True)
class RegisterSchema:
    size: int
    bits: int


SLOT_REGISTER = "SwitchMLIngress.bitmap"
"""An aggregation register: 2 * max_pool_size cells, the slots of both shadow sets."""
SLOT_RANGE = ("slot_base", "pool_size")
"""The parameters by which an action gives a job its register cells (set_worker, set_uplink)."""


@dataclass(frozen=True)
class ProgramSchema:
    """What a running program offers the control plane: tables, registers, counters (size)."""

    tables: Mapping[str, TableSchema]
    registers: Mapping[str, RegisterSchema]
    counters: Mapping[str, int]

    @property
    def max_pool_size(self) -> int:
        """Slots per shadow set: the cells a job's slot range must fit in."""
        return self.registers[SLOT_REGISTER].size // 2

    def check_slot_range(self, what: str, fields: Sequence[Field], values: Sequence[int]) -> None:
        """Refuse an action whose slot range (``SLOT_RANGE``) runs past the registers.

        Field widths alone let a set_worker entry name cells past them (slot_base 16 bits),
        and each target would then do something else with such an update (the embedded
        switch crashed, bmv2 wrote another job's cell, the eBPF switch dropped it uncounted).
        """
        params = dict(zip((f.name for f in fields), values))
        if not all(name in params for name in SLOT_RANGE):
            return
        base, pool = (params[name] for name in SLOT_RANGE)
        if base + pool > self.max_pool_size:
            raise ControlPlaneError(
                f"{what}: slots {base}..{base + pool - 1} (slot_base={base}, pool_size={pool}) "
                f"run past the switch's {self.max_pool_size} slots"
            )

    def to_json(self) -> dict:
        return {
            "tables": {
                name: {
                    "keys": [[f.name, f.bits] for f in t.keys],
                    "actions": {a: [[f.name, f.bits] for f in p] for a, p in t.actions.items()},
                    "size": t.size,
                }
                for name, t in self.tables.items()
            },
            "registers": {name: [r.size, r.bits] for name, r in self.registers.items()},
            "counters": dict(self.counters),
        }

    @classmethod
    def from_json(cls, data: dict) -> "ProgramSchema":
        def fields(pairs: list) -> tuple[Field, ...]:
            return tuple(Field(name, bits) for name, bits in pairs)

        return cls(
            tables={
                name: TableSchema(fields(t["keys"]), {a: fields(p) for a, p in t["actions"].items()}, t["size"])
                for name, t in data["tables"].items()
            },
            registers={name: RegisterSchema(size, bits) for name, (size, bits) in data["registers"].items()},
            counters=dict(data["counters"]),
        )


def cli_command(verb: str, *args: object) -> str:
    """One simple_switch_CLI line: ``table_add t a 1 10.0.0.1 => 0 8``."""
    return " ".join([verb, *(str(a) for a in args)])


class SwitchControl(ABC):
    """Control-plane operations of one running switch, the same for every target."""

    def __init__(self, command_log: Path | None = None) -> None:
        self._command_log = command_log

    # -- what a target implements ------------------------------------------------------

    @abstractmethod
    def _load_schema(self) -> ProgramSchema:
        """The running program's tables, registers and counters (asked once per connection)."""

    @abstractmethod
    def _table_num_entries(self, table: str) -> int: ...

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

    def _registers_reset(self, registers: Sequence[str]) -> None:
        """``_register_reset`` of each; a target whose registers share storage (a slot's
        cells in one eBPF map entry) overrides it to clear them in one pass."""
        for register in registers:
            self._register_reset(register)

    @abstractmethod
    def _counter_read(self, counter: str) -> list[tuple[int, int]]: ...

    @abstractmethod
    def _counter_reset(self, counter: str) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """Release the connection to the switch (the switch keeps running)."""

    def primitives(self, names: Sequence[str]) -> dict[str, Any]:
        """The target's own primitives by name (``table_add`` -> its ``_table_add``), unlogged
        and unchecked: for a server that relays calls a client logged and checked already
        (switches/remote_control.py)."""
        return {name: getattr(self, f"_{name}") for name in names}

    # -- the interface -----------------------------------------------------------------

    @functools.cached_property
    def schema(self) -> ProgramSchema:
        return self._load_schema()

    def _table(self, table: str) -> TableSchema:
        return lookup(self.schema.tables, table, "table")

    def _action_params(self, table: str, action: str, action_params: Sequence[MatchValue]) -> tuple[int, ...]:
        fields = lookup(self._table(table).actions, action, "action", where=f"{table}: ")
        encoded = encode_fields(fields, action_params, f"{table} action {action}")
        self.schema.check_slot_range(f"{table} action {action}", fields, encoded)
        return encoded

    def _register(self, register: str) -> RegisterSchema:
        return lookup(self.schema.registers, register, "register")

    def _counter(self, counter: str) -> int:
        return lookup(self.schema.counters, counter, "counter")

    def _record(self, verb: str, *args: object) -> None:
        line = cli_command(verb, *args)
        log.debug("control: %s", line)
        if self._command_log is not None:
            with self._command_log.open("a") as f:
                f.write(line + "\n")

    def table_add(self, table: str, action: str, keys: Sequence[MatchValue], action_params: Sequence[MatchValue] = ()) -> int:
        """Add an exact-match entry; returns its handle."""
        self._record("table_add", table, action, *keys, "=>", *action_params)
        encoded_keys = encode_fields(self._table(table).keys, keys, f"{table} key")
        encoded_params = self._action_params(table, action, action_params)
        return self._table_add(table, action, encoded_keys, encoded_params)

    def table_set_default(self, table: str, action: str, action_params: Sequence[MatchValue] = ()) -> None:
        self._record("table_set_default", table, action, *action_params)
        self._table_set_default(table, action, self._action_params(table, action, action_params))

    def table_clear(self, table: str) -> None:
        self._record("table_clear", table)
        self._table(table)
        self._table_clear(table)

    def table_num_entries(self, table: str) -> int:
        """Entries the table holds now (tests use it to wait for a learning controller)."""
        self._record("table_num_entries", table)
        self._table(table)
        return self._table_num_entries(table)

    def mc_mgrp_create(self, group: int) -> None:
        self._record("mc_mgrp_create", group)
        check_mc_group(group)
        self._mc_mgrp_create(group)

    def mc_node_create(self, rid: int, ports: Sequence[int]) -> int:
        """Create a multicast node (replication id + ports); returns its handle."""
        self._record("mc_node_create", rid, *ports)
        check_mc_node(rid, ports)
        return self._mc_node_create(rid, ports)

    def mc_node_associate(self, group: int, node_handle: int) -> None:
        self._record("mc_node_associate", group, node_handle)
        self._mc_node_associate(group, node_handle)

    def register_read(self, register: str, index: int | None = None) -> list[int] | int:
        """One cell (``index`` given) or the whole register array."""
        self._record("register_read", register, *([] if index is None else [index]))
        spec = self._register(register)
        if index is not None:
            check_register_cell(register, spec.size, spec.bits, index)
        cells = self._register_read(register)
        return cells if index is None else cells[index]

    def register_write(self, register: str, index: int, value: int) -> None:
        self._record("register_write", register, index, value)
        spec = self._register(register)
        check_register_cell(register, spec.size, spec.bits, index, value)
        self._register_write(register, index, value)

    def register_reset(self, register: str) -> None:
        self._record("register_reset", register)
        self._register(register)
        self._register_reset(register)

    def registers_reset(self, registers: Sequence[str]) -> None:
        """``register_reset`` of every one of ``registers`` (logged as one CLI line each, so
        the command log still replays on simple_switch_CLI), in one call to the target."""
        for register in registers:
            self._record("register_reset", register)
            self._register(register)
        self._registers_reset(registers)

    def counter_read(self, counter: str) -> list[tuple[int, int]]:
        """(packets, bytes) for every cell of a counter array."""
        self._record("counter_read", counter)
        self._counter(counter)
        return self._counter_read(counter)

    def counter_reset(self, counter: str) -> None:
        self._record("counter_reset", counter)
        self._counter(counter)
        self._counter_reset(counter)

    def __enter__(self) -> "SwitchControl":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
