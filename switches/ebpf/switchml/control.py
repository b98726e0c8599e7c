"""``SwitchControl`` for the eBPF switch: every primitive is a few BPF map operations.

Tables are hash maps (key struct -> action number + parameters) with a one-cell default
map each; multicast groups and nodes live in maps too, so every control connection, and
the data path, see the same state; registers are fields of the per-slot struct (both
shadow sets of a slot, read and written under its bpf_spin_lock with BPF_F_LOCK);
counters are per-CPU arrays, summed here. The maps are opened by id (the running switch
knows them, see datapath.py), so nothing needs to stay pinned in the BPF filesystem.
The register cells' layout is the build's k: the control connection is told the k the
switch was started with, and refuses maps whose sizes say another.

A register reset or write while updates arrive is not atomic across slots (nor is it on
bmv2): the testbed resets registers between jobs, when no worker sends.
"""

from __future__ import annotations

import ctypes
import errno
from pathlib import Path
from typing import Mapping, Sequence

from switches.control import (
    ControlPlaneError,
    MatchValue,
    ProgramSchema,
    SwitchControl,
    duplicate_entry_error,
    mc_group_exists_error,
    mc_group_missing_error,
    mc_node_missing_error,
    table_full_error,
)
from switches.ebpf.switchml import maps
from switches.ebpf.bpf import BPF_EXIST, BPF_F_LOCK, BPF_NOEXIST, BpfMap

ZERO = bytes(maps.U32Key(0))


def _key(index: int) -> bytes:
    return bytes(maps.U32Key(index))


class EbpfControl(SwitchControl):
    """Control plane of one running eBPF switch built for ``k``, given its maps' ids by name."""

    def __init__(self, map_ids: Mapping[str, int], k: int, command_log: Path | None = None) -> None:
        super().__init__(command_log)
        self.k = k
        self._layouts = maps.layouts(k)
        self._fields = maps.aggregation_fields(k)
        self._slot_cells = maps.slot_cells(k)
        self._maps: dict[str, BpfMap] = {}
        self._adds = 0
        """Entries this connection added: their handles (a hash map keeps none, and nothing
        deletes by handle). Counting the map's entries instead costs a syscall per entry,
        per add: filling a 4,096-entry L2 table took a minute."""
        try:
            for name, map_id in map_ids.items():
                self._maps[name] = self._open(name, map_id)
        except BaseException:
            self.close()
            raise
        missing = set(self._layouts) - set(self._maps)
        if missing:
            self.close()
            raise ControlPlaneError(f"eBPF switch lacks the maps {', '.join(sorted(missing))}")
        resized = [f"{t.map_name} holds {self._maps[t.map_name].max_entries}, the P4 table {t.size}"
                   for t in maps.TABLES.values() if self._maps[t.map_name].max_entries != t.size]
        if resized:
            self.close()
            raise ControlPlaneError(f"eBPF switch's tables differ in size from the P4 program's: {'; '.join(resized)}")

    def _open(self, name: str, map_id: int) -> BpfMap:
        try:
            bpf_map = BpfMap.from_id(map_id)
        except OSError as error:
            raise ControlPlaneError(f"cannot open map {name} (id {map_id}): {error} (has the switch stopped?)") from error
        key_type, value_type = self._layouts[name]
        if (bpf_map.key_size, bpf_map.value_size) != (ctypes.sizeof(key_type), ctypes.sizeof(value_type)):
            bpf_map.close()
            raise ControlPlaneError(
                f"map {name}: key/value of {bpf_map.key_size}/{bpf_map.value_size} bytes, but maps.py says "
                f"{ctypes.sizeof(key_type)}/{ctypes.sizeof(value_type)} for k = {self.k}: switchml.bpf.c and maps.py "
                "disagree, or the program was built for another k"
            )
        return bpf_map

    def _load_schema(self) -> ProgramSchema:
        return maps.program_schema(self.k, self._maps[maps.AGGREGATION_MAP].max_entries)

    # -- tables -----------------------------------------------------------------------------

    def _table_num_entries(self, table: str) -> int:
        return sum(1 for _ in self._maps[maps.TABLES[table].map_name].keys())

    @staticmethod
    def _action_value(layout: maps.TableLayout, action: str, action_params: Sequence[MatchValue]) -> bytes:
        number, fields = layout.actions[action]
        return bytes(layout.value_type(action=number, **{field.name: value for field, value in zip(fields, action_params)}))

    def _table_add(self, table: str, action: str, keys: Sequence[MatchValue], action_params: Sequence[MatchValue]) -> int:
        layout = maps.TABLES[table]
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
        layout = maps.TABLES[table]
        self._maps[layout.default_map_name].update(ZERO, self._action_value(layout, action, action_params))

    def _table_clear(self, table: str) -> None:
        entries = self._maps[maps.TABLES[table].map_name]
        for key in list(entries.keys()):
            try:
                entries.delete(key)
            except FileNotFoundError:
                pass  # already gone: another control connection cleared the table meanwhile

    # -- multicast --------------------------------------------------------------------------

    def _group(self, group: int) -> maps.McGroup | None:
        raw = self._maps[maps.MC_GROUP_MAP].lookup(_key(group))
        return None if raw is None else maps.McGroup.from_buffer_copy(raw)

    def _mc_mgrp_create(self, group: int) -> None:
        try:
            self._maps[maps.MC_GROUP_MAP].update(_key(group), bytes(maps.McGroup()), BPF_NOEXIST)
        except FileExistsError:
            raise mc_group_exists_error(group) from None
        except OSError as error:
            raise ControlPlaneError(f"mc_mgrp_create {group} failed: {error}") from error

    def _mc_node_create(self, rid: int, ports: Sequence[int]) -> int:
        if len(ports) > maps.MC_MAX_NODE_PORTS:
            raise ControlPlaneError(f"a multicast node holds at most {maps.MC_MAX_NODE_PORTS} ports, got {len(ports)}")
        nodes = self._maps[maps.MC_NODE_MAP]
        handle = sum(1 for _ in nodes.keys())
        node = maps.McNode(rid, len(ports))
        node.ports[: len(ports)] = list(ports)
        try:
            nodes.update(_key(handle), bytes(node), BPF_NOEXIST)
        except OSError as error:
            raise ControlPlaneError(f"mc_node_create {rid} failed: {error}") from error
        return handle

    def _mc_node_associate(self, group: int, node_handle: int) -> None:
        entry = self._group(group)
        if entry is None:
            raise mc_group_missing_error(group)
        raw = self._maps[maps.MC_NODE_MAP].lookup(_key(node_handle))
        if raw is None:
            raise mc_node_missing_error(node_handle)
        handles = list(entry.nodes[: entry.num_nodes])
        if node_handle in handles:
            raise ControlPlaneError(f"multicast node {node_handle} is already in group {group}")
        node = maps.McNode.from_buffer_copy(raw)
        replicas = [(r.rid, r.port) for r in entry.replicas[: entry.num_replicas]]
        replicas += [(node.rid, port) for port in node.ports[: node.num_ports]]
        if len(handles) + 1 > maps.MC_MAX_NODES or len(replicas) > maps.MC_MAX_REPLICAS:
            raise ControlPlaneError(
                f"multicast group {group} would exceed {maps.MC_MAX_NODES} nodes or {maps.MC_MAX_REPLICAS} copies"
            )
        entry.nodes[entry.num_nodes] = node_handle
        entry.num_nodes += 1
        for i, (rid, port) in enumerate(replicas):
            entry.replicas[i] = maps.Replica(rid, port)
        entry.num_replicas = len(replicas)
        self._maps[maps.MC_GROUP_MAP].update(_key(group), bytes(entry), BPF_EXIST)

    # -- registers ----------------------------------------------------------------------------

    def _slots(self) -> list[ctypes.Structure]:
        cells = self._maps[maps.AGGREGATION_MAP]
        return [self._slot_cells.from_buffer_copy(cells.lookup(_key(slot), BPF_F_LOCK)) for slot in range(cells.max_entries)]

    def _register_read(self, register: str) -> list[int]:
        if register in maps.THRESHOLDS:
            return [maps.Threshold.from_buffer_copy(self._maps[maps.THRESHOLDS[register]].lookup(ZERO)).value]
        field, element = self._fields[register]
        slots = self._slots()
        cells = [slot.set[shadow_set] for shadow_set in (0, 1) for slot in slots]
        if element is None:
            return [getattr(cell, field) for cell in cells]
        return [cell.value[element] for cell in cells]

    def _write_cells(self, register: str, indices: range, value: int) -> None:
        """register[index] = value for every index (register cell i: set i // pool, slot i % pool)."""
        field, element = self._fields[register]
        cells = self._maps[maps.AGGREGATION_MAP]
        pool = cells.max_entries
        sets_by_slot: dict[int, list[int]] = {}
        for index in indices:
            sets_by_slot.setdefault(index % pool, []).append(index // pool)
        for slot, shadow_sets in sets_by_slot.items():
            state = self._slot_cells.from_buffer_copy(cells.lookup(_key(slot), BPF_F_LOCK))
            for shadow_set in shadow_sets:
                cell = state.set[shadow_set]
                if element is None:
                    setattr(cell, field, value)
                else:
                    cell.value[element] = value
            cells.update(_key(slot), bytes(state), BPF_F_LOCK)

    def _register_write(self, register: str, index: int, value: int) -> None:
        if register in maps.THRESHOLDS:
            self._maps[maps.THRESHOLDS[register]].update(ZERO, bytes(maps.Threshold(value)))
        else:
            self._write_cells(register, range(index, index + 1), value)

    def _register_reset(self, register: str) -> None:
        if register in maps.THRESHOLDS:
            self._register_write(register, 0, 0)
        else:
            self._write_cells(register, range(2 * self._maps[maps.AGGREGATION_MAP].max_entries), 0)

    def _registers_reset(self, registers: Sequence[str]) -> None:
        """Every slot's cells zeroed with one map update each when ``registers`` name every
        field of them (the aggregation state: reset_aggregation_state), instead of a
        read-modify-write of every slot per register (~1 s for a switch at k = 256)."""
        slot_registers = [r for r in registers if r not in maps.THRESHOLDS]
        if set(slot_registers) != set(self._fields):
            super()._registers_reset(registers)
            return
        for register in registers:
            if register in maps.THRESHOLDS:
                self._register_reset(register)
        cells = self._maps[maps.AGGREGATION_MAP]
        empty = bytes(self._slot_cells())
        for slot in range(cells.max_entries):
            cells.update(_key(slot), empty, BPF_F_LOCK)

    # -- counters -----------------------------------------------------------------------------

    def _counter_read(self, counter: str) -> list[tuple[int, int]]:
        cells = self._maps[maps.COUNTERS[counter]]
        totals = []
        for index in range(cells.max_entries):
            per_cpu = [maps.CounterCell.from_buffer_copy(raw) for raw in cells.lookup_percpu(_key(index))]
            totals.append((sum(c.packets for c in per_cpu), sum(c.bytes for c in per_cpu)))
        return totals

    def _counter_reset(self, counter: str) -> None:
        cells = self._maps[maps.COUNTERS[counter]]
        for index in range(cells.max_entries):
            cells.update(_key(index), bytes(maps.CounterCell()))

    def close(self) -> None:
        for bpf_map in self._maps.values():
            bpf_map.close()
        self._maps.clear()
