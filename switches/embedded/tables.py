"""Exact-match tables with named actions and a default action, as bmv2 exposes them.

The control plane addresses tables, actions and parameters by their P4 names; this module
checks every request against the table's declared key widths and action signatures so a
wrong key or action is refused with a clear message instead of silently never matching.
The data path reads ``entries`` / ``default`` directly (one dict lookup per packet).
"""

from __future__ import annotations

from typing import Callable, Sequence

from switches.control import Field, MatchValue, TableSchema, duplicate_entry_error, encode_fields, lookup, table_full_error

ActionCall = tuple[str, tuple[int, ...]]
"""An action name and its parameter values, as stored in an entry or as the default."""


class ExactMatchTable:
    """One P4 table with exact keys; ``on_change`` lets the data path refresh derived caches.

    It holds at most ``size`` entries, the P4 table's: bmv2 and the eBPF maps refuse more,
    and a switch that learns without a limit would forward what the others flood."""

    def __init__(self, name: str, keys: Sequence[Field], actions: dict[str, Sequence[Field]], default: str, size: int) -> None:
        self.name = name
        self.size = size
        self.keys = tuple(keys)
        self.actions = {action: tuple(fields) for action, fields in actions.items()}
        self._initial_default: ActionCall = (default, ())
        self.default: ActionCall = self._initial_default
        self.entries: dict[tuple[int, ...], ActionCall] = {}
        self._handles: dict[int, tuple[int, ...]] = {}
        self._next_handle = 0
        self.on_change: Callable[[], None] = lambda: None

    def _action(self, action: str, action_params: Sequence[MatchValue]) -> ActionCall:
        fields = lookup(self.actions, action, "action", where=f"{self.name}: ")
        return action, encode_fields(fields, action_params, f"{self.name} action {action}")

    def add(self, action: str, keys: Sequence[MatchValue], action_params: Sequence[MatchValue]) -> int:
        key = encode_fields(self.keys, keys, f"{self.name} key")
        call = self._action(action, action_params)
        if key in self.entries:
            raise duplicate_entry_error(self.name, keys)
        if len(self.entries) >= self.size:
            raise table_full_error(self.name, self.size)
        self.entries[key] = call
        handle = self._next_handle
        self._next_handle += 1
        self._handles[handle] = key
        self.on_change()
        return handle

    def set_default(self, action: str, action_params: Sequence[MatchValue]) -> None:
        self.default = self._action(action, action_params)
        self.on_change()

    def clear(self) -> None:
        """Remove every entry (the default action stays, as with bmv2's table_clear)."""
        self.entries.clear()
        self._handles.clear()
        self.on_change()

    def schema(self) -> TableSchema:
        return TableSchema(self.keys, self.actions, self.size)

    def lookup(self, key: tuple[int, ...]) -> ActionCall:
        return self.entries.get(key, self.default)
