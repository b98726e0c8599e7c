"""The control-plane primitives every program of the eBPF target implements alike over its maps.

A P4 table is a hash map (key struct -> action number + parameters) with a one-cell
``<table>_default`` map; the traffic manager's multicast groups and nodes are the maps
``mc_group`` and ``mc_node``; a counter is a per-CPU array of (packets, bytes), summed here.
``MapControl`` implements those SwitchControl primitives from a program's ``TableLayout``s
and counter maps; a program's control plane adds its registers (their layout is its own).
The C structs are mirrored as ctypes structures; a program opens its maps by id and checks
each one's key and value sizes against them, so a drift fails loudly.
"""

from __future__ import annotations

import ctypes
import errno
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Mapping, Sequence

from protocol.params import read_p4_constants
from switches.control import (
    ControlPlaneError,
    Field,
    MatchValue,
    SwitchControl,
    TableSchema,
    duplicate_entry_error,
    mc_group_exists_error,
    mc_group_missing_error,
    mc_node_missing_error,
    table_full_error,
)
from switches.drop_simulator import EGRESS_DROP_THRESHOLD, INGRESS_DROP_THRESHOLD, DropSimulator
from switches.ebpf.bpf import BPF_EXIST, BPF_NOEXIST, BpfMap

MC_GROUP_MAP = "mc_group"
MC_NODE_MAP = "mc_node"


class U32Key(ctypes.Structure):
    _fields_ = [("value", ctypes.c_uint32)]


ZERO = bytes(U32Key(0))


def u32_key(index: int) -> bytes:
    return bytes(U32Key(index))


class CounterCell(ctypes.Structure):
    _fields_ = [("packets", ctypes.c_uint64), ("bytes", ctypes.c_uint64)]


class Threshold(ctypes.Structure):
    """A one-cell register of 32 bits (struct threshold)."""

    _fields_ = [("value", ctypes.c_uint32)]


def drop_threshold_maps(drop_simulator: DropSimulator) -> dict[str, str]:
    """A program's drop-simulator registers (its P4 names) -> tc_switch.h's maps of them, which
    every program of the target has."""
    return {drop_simulator.ingress_threshold: INGRESS_DROP_THRESHOLD, drop_simulator.egress_threshold: EGRESS_DROP_THRESHOLD}


class MacKey(ctypes.Structure):
    """A 48-bit MAC address as a host-order integer: l2_table's key."""

    _fields_ = [("mac", ctypes.c_uint64)]


class L2Action(ctypes.Structure):
    """l2_table's value, l2_forward(port) | l2_flood, as every program forwards ordinary traffic."""

    _fields_ = [("action", ctypes.c_uint32), ("port", ctypes.c_uint32)]


@dataclass(frozen=True)
class TableLayout:
    """One P4 table: its entries map, its one-cell default map, keys and actions."""

    map_name: str
    keys: tuple[Field, ...]
    key_type: type[ctypes.Structure]
    actions: Mapping[str, tuple[int, tuple[Field, ...]]]
    """Action name -> (its number in the program's header, its parameters)."""
    value_type: type[ctypes.Structure]
    size: int
    """The P4 table's size, which the C program gives the map as max_entries."""

    @property
    def default_map_name(self) -> str:
        return f"{self.map_name}_default"

    def schema(self) -> TableSchema:
        return TableSchema(self.keys, {action: fields for action, (_number, fields) in self.actions.items()}, self.size)


@dataclass(frozen=True)
class Multicast:
    """struct replica, mc_group and mc_node of a program built with these limits."""

    replica: type[ctypes.Structure]
    group: type[ctypes.Structure]
    node: type[ctypes.Structure]
    max_nodes: int
    max_replicas: int
    max_node_ports: int


@functools.cache
def multicast(max_nodes: int, max_replicas: int, max_node_ports: int) -> Multicast:
    """The multicast maps' layouts for a program's limits (its MC_MAX_* defines)."""

    class Replica(ctypes.Structure):
        _fields_ = [("rid", ctypes.c_uint16), ("port", ctypes.c_uint16)]

    class McGroup(ctypes.Structure):
        _fields_ = [
            ("num_nodes", ctypes.c_uint32),
            ("nodes", ctypes.c_uint32 * max_nodes),
            ("num_replicas", ctypes.c_uint32),
            ("replicas", Replica * max_replicas),
        ]

    class McNode(ctypes.Structure):
        _fields_ = [("rid", ctypes.c_uint32), ("num_ports", ctypes.c_uint32), ("ports", ctypes.c_uint16 * max_node_ports)]

    return Multicast(Replica, McGroup, McNode, max_nodes, max_replicas, max_node_ports)


TC_SWITCH_H = Path(__file__).resolve().parent / "tc_switch.h"
"""The C side of what every program of the target shares: the multicast maps and their limits,
the port wiring, the counter cells."""
SHARED_DEFINES = read_p4_constants(TC_SWITCH_H)
PORT_NUMBERS = SHARED_DEFINES["PORT_NUMBERS"]
MC = multicast(SHARED_DEFINES["MC_MAX_NODES"], SHARED_DEFINES["MC_MAX_REPLICAS"], SHARED_DEFINES["MC_MAX_NODE_PORTS"])
"""struct replica, mc_group and mc_node of tc_switch.h, which every program includes."""


class MapControl(SwitchControl):
    """Tables, multicast, counters and one-cell registers over a program's maps (opened by
    id); a subclass gives its ``tables``, ``counters`` and ``thresholds`` and implements its
    other registers (the multicast maps are tc_switch.h's, the same in every program)."""

    tables: ClassVar[Mapping[str, TableLayout]]
    counters: ClassVar[Mapping[str, str]]
    """P4 counter name -> its map."""
    thresholds: ClassVar[Mapping[str, str]]
    """P4 name of a one-cell register (the drop simulator's thresholds, ATP's ecn_threshold) ->
    its map, of one struct threshold."""
    mc: ClassVar[Multicast] = MC

    def __init__(self, map_ids: Mapping[str, int], layouts: Mapping[str, tuple[type, type]], what: str,
                 command_log: Path | None = None) -> None:
        """Open every map of ``map_ids`` and check it against ``layouts`` (name -> key and
        value types); ``what`` names the build in the message of a mismatch."""
        super().__init__(command_log)
        self._maps: dict[str, BpfMap] = {}
        self._adds = 0
        """Entries this connection added: their handles (a hash map keeps none, and nothing
        deletes by handle). Counting the map's entries instead costs a syscall per entry,
        per add: filling a 4,096-entry L2 table took a minute."""
        try:
            for name, map_id in map_ids.items():
                self._maps[name] = self._open(name, map_id, layouts, what)
            missing = set(layouts) - set(self._maps)
            if missing:
                raise ControlPlaneError(f"eBPF switch lacks the maps {', '.join(sorted(missing))}")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _open(name: str, map_id: int, layouts: Mapping[str, tuple[type, type]], what: str) -> BpfMap:
        try:
            bpf_map = BpfMap.from_id(map_id)
        except OSError as error:
            raise ControlPlaneError(f"cannot open map {name} (id {map_id}): {error} (has the switch stopped?)") from error
        key_type, value_type = layouts[name]
        if (bpf_map.key_size, bpf_map.value_size) != (ctypes.sizeof(key_type), ctypes.sizeof(value_type)):
            bpf_map.close()
            raise ControlPlaneError(
                f"map {name}: key/value of {bpf_map.key_size}/{bpf_map.value_size} bytes, but the control plane says "
                f"{ctypes.sizeof(key_type)}/{ctypes.sizeof(value_type)} for {what}: the C program and its maps.py "
                "disagree, or the program was built for another k"
            )
        return bpf_map

    # -- one-cell registers -------------------------------------------------------------------

    def _threshold_read(self, register: str) -> list[int]:
        return [Threshold.from_buffer_copy(self._maps[self.thresholds[register]].lookup(ZERO)).value]

    def _threshold_write(self, register: str, value: int) -> None:
        self._maps[self.thresholds[register]].update(ZERO, bytes(Threshold(value)))

    # -- tables -----------------------------------------------------------------------------

    def _table_num_entries(self, table: str) -> int:
        return sum(1 for _ in self._maps[self.tables[table].map_name].keys())

    @staticmethod
    def _action_value(layout: TableLayout, action: str, action_params: Sequence[MatchValue]) -> bytes:
        number, fields = layout.actions[action]
        return bytes(layout.value_type(action=number, **{field.name: value for field, value in zip(fields, action_params)}))

    def _table_add(self, table: str, action: str, keys: Sequence[MatchValue], action_params: Sequence[MatchValue]) -> int:
        layout = self.tables[table]
        entries = self._maps[layout.map_name]
        try:
            entries.update(bytes(layout.key_type(*keys)), self._action_value(layout, action, action_params), BPF_NOEXIST)
        except FileExistsError:
            raise duplicate_entry_error(table, keys) from None
        except OSError as error:
            if error.errno == errno.E2BIG:
                raise table_full_error(table, entries.max_entries) from None
            raise ControlPlaneError(f"{table}: table_add failed: {error}") from error
        self._adds += 1
        return self._adds - 1

    def _table_set_default(self, table: str, action: str, action_params: Sequence[MatchValue]) -> None:
        layout = self.tables[table]
        self._maps[layout.default_map_name].update(ZERO, self._action_value(layout, action, action_params))

    def _table_clear(self, table: str) -> None:
        entries = self._maps[self.tables[table].map_name]
        for key in list(entries.keys()):
            try:
                entries.delete(key)
            except FileNotFoundError:
                pass  # already gone: another control connection cleared the table meanwhile

    # -- multicast --------------------------------------------------------------------------

    def _group(self, group: int) -> ctypes.Structure | None:
        raw = self._maps[MC_GROUP_MAP].lookup(u32_key(group))
        return None if raw is None else self.mc.group.from_buffer_copy(raw)

    def _mc_mgrp_create(self, group: int) -> None:
        try:
            self._maps[MC_GROUP_MAP].update(u32_key(group), bytes(self.mc.group()), BPF_NOEXIST)
        except FileExistsError:
            raise mc_group_exists_error(group) from None
        except OSError as error:
            raise ControlPlaneError(f"mc_mgrp_create {group} failed: {error}") from error

    def _mc_node_create(self, rid: int, ports: Sequence[int]) -> int:
        if len(ports) > self.mc.max_node_ports:
            raise ControlPlaneError(f"a multicast node holds at most {self.mc.max_node_ports} ports, got {len(ports)}")
        nodes = self._maps[MC_NODE_MAP]
        handle = sum(1 for _ in nodes.keys())
        node = self.mc.node(rid, len(ports))
        node.ports[: len(ports)] = list(ports)
        try:
            nodes.update(u32_key(handle), bytes(node), BPF_NOEXIST)
        except OSError as error:
            raise ControlPlaneError(f"mc_node_create {rid} failed: {error}") from error
        return handle

    def _mc_node_associate(self, group: int, node_handle: int) -> None:
        entry = self._group(group)
        if entry is None:
            raise mc_group_missing_error(group)
        raw = self._maps[MC_NODE_MAP].lookup(u32_key(node_handle))
        if raw is None:
            raise mc_node_missing_error(node_handle)
        handles = list(entry.nodes[: entry.num_nodes])
        if node_handle in handles:
            raise ControlPlaneError(f"multicast node {node_handle} is already in group {group}")
        node = self.mc.node.from_buffer_copy(raw)
        replicas = [(r.rid, r.port) for r in entry.replicas[: entry.num_replicas]]
        replicas += [(node.rid, port) for port in node.ports[: node.num_ports]]
        if len(handles) + 1 > self.mc.max_nodes or len(replicas) > self.mc.max_replicas:
            raise ControlPlaneError(
                f"multicast group {group} would exceed {self.mc.max_nodes} nodes or {self.mc.max_replicas} copies"
            )
        entry.nodes[entry.num_nodes] = node_handle
        entry.num_nodes += 1
        for i, (rid, port) in enumerate(replicas):
            entry.replicas[i] = self.mc.replica(rid, port)
        entry.num_replicas = len(replicas)
        self._maps[MC_GROUP_MAP].update(u32_key(group), bytes(entry), BPF_EXIST)

    # -- counters -----------------------------------------------------------------------------

    def _counter_read(self, counter: str) -> list[tuple[int, int]]:
        cells = self._maps[self.counters[counter]]
        totals = []
        for index in range(cells.max_entries):
            per_cpu = [CounterCell.from_buffer_copy(raw) for raw in cells.lookup_percpu(u32_key(index))]
            totals.append((sum(c.packets for c in per_cpu), sum(c.bytes for c in per_cpu)))
        return totals

    def _counter_reset(self, counter: str) -> None:
        cells = self._maps[self.counters[counter]]
        for index in range(cells.max_entries):
            cells.update(u32_key(index), bytes(CounterCell()))

    def close(self) -> None:
        for bpf_map in self._maps.values():
            bpf_map.close()
        self._maps.clear()
