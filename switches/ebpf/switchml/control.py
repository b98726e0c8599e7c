"""``SwitchControl`` for the eBPF switch: every primitive is a few BPF map operations.

Tables, multicast groups and counters are as every program of the target has them
(switches/ebpf/map_control.py: hash maps with a one-cell default map, the mc_group and
mc_node maps, per-CPU counters summed here); registers are fields of the per-slot struct
(both shadow sets of a slot, read and written under its bpf_spin_lock with BPF_F_LOCK).
The maps are opened by id (the running switch knows them, see datapath.py), so nothing
needs to stay pinned in the BPF filesystem. The register cells' layout is the build's k:
the control connection is told the k the switch was started with, and refuses maps whose
sizes say another.

A register reset or write while updates arrive is not atomic across slots (nor is it on
bmv2): the testbed resets registers between jobs, when no worker sends.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Mapping, Sequence

from switches.control import ControlPlaneError, ProgramSchema
from switches.ebpf.bpf import BPF_F_LOCK
from switches.ebpf.map_control import MapControl, u32_key
from switches.ebpf.switchml import maps


class EbpfControl(MapControl):
    """Control plane of one running eBPF switch built for ``k``, given its maps' ids by name."""

    tables = maps.TABLES
    counters = maps.COUNTERS
    thresholds = maps.THRESHOLDS

    def __init__(self, map_ids: Mapping[str, int], k: int, command_log: Path | None = None) -> None:
        super().__init__(map_ids, maps.layouts(k), f"k = {k}", command_log)
        self.k = k
        self._fields = maps.aggregation_fields(k)
        self._slot_cells = maps.slot_cells(k)
        resized = [f"{t.map_name} holds {self._maps[t.map_name].max_entries}, the P4 table {t.size}"
                   for t in maps.TABLES.values() if self._maps[t.map_name].max_entries != t.size]
        if resized:
            self.close()
            raise ControlPlaneError(f"eBPF switch's tables differ in size from the P4 program's: {'; '.join(resized)}")

    def _load_schema(self) -> ProgramSchema:
        return maps.program_schema(self.k, self._maps[maps.AGGREGATION_MAP].max_entries)

    # -- registers ----------------------------------------------------------------------------

    def _slots(self) -> list[ctypes.Structure]:
        cells = self._maps[maps.AGGREGATION_MAP]
        return [self._slot_cells.from_buffer_copy(cells.lookup(u32_key(slot), BPF_F_LOCK)) for slot in range(cells.max_entries)]

    def _register_read(self, register: str) -> list[int]:
        if register in self.thresholds:
            return self._threshold_read(register)
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
            state = self._slot_cells.from_buffer_copy(cells.lookup(u32_key(slot), BPF_F_LOCK))
            for shadow_set in shadow_sets:
                cell = state.set[shadow_set]
                if element is None:
                    setattr(cell, field, value)
                else:
                    cell.value[element] = value
            cells.update(u32_key(slot), bytes(state), BPF_F_LOCK)

    def _register_write(self, register: str, index: int, value: int) -> None:
        if register in self.thresholds:
            self._threshold_write(register, value)
        else:
            self._write_cells(register, range(index, index + 1), value)

    def _register_reset(self, register: str) -> None:
        if register in self.thresholds:
            self._threshold_write(register, 0)
        else:
            self._write_cells(register, range(2 * self._maps[maps.AGGREGATION_MAP].max_entries), 0)

    def _registers_reset(self, registers: Sequence[str]) -> None:
        """Every slot's cells zeroed with one map update each when ``registers`` name every
        field of them (the aggregation state: reset_aggregation_state), instead of a
        read-modify-write of every slot per register (~1 s for a switch at k = 256)."""
        slot_registers = [r for r in registers if r not in self.thresholds]
        if set(slot_registers) != set(self._fields):
            super()._registers_reset(registers)
            return
        for register in registers:
            if register in self.thresholds:
                self._threshold_write(register, 0)
        cells = self._maps[maps.AGGREGATION_MAP]
        empty = bytes(self._slot_cells())
        for slot in range(cells.max_entries):
            cells.update(u32_key(slot), empty, BPF_F_LOCK)
