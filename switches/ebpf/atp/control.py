"""``SwitchControl`` for ATP's eBPF program: tables, multicast and counters as every program
of the target has them (switches/ebpf/map_control.py), and ATP's registers.

The aggregator registers (owner_app, owner_seq, bitmap, count, ecn, value_XX) are fields of
one map value per aggregator, read and written under its bpf_spin_lock (BPF_F_LOCK);
ecn_threshold and the drop simulator's thresholds are one-cell maps; phantom_queue_rate and phantom_queue_limit are
fields of each port's phantom queue (writing either restarts that queue empty). As on every target, a register write
while packets arrive is not atomic across aggregators: the testbed resets between jobs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

from switches.control import ProgramSchema
from switches.ebpf.atp import maps
from switches.ebpf.bpf import BPF_F_LOCK
from switches.ebpf.map_control import MapControl, u32_key


class AtpEbpfControl(MapControl):
    """Control plane of one running ATP eBPF switch built for ``k``, given its maps' ids by name."""

    tables = maps.TABLES
    counters = maps.COUNTERS
    thresholds = maps.THRESHOLDS

    def __init__(self, map_ids: Mapping[str, int], k: int, command_log: Path | None = None) -> None:
        super().__init__(map_ids, maps.layouts(k), f"ATP's program at k = {k}", command_log)
        self.k = k
        self._aggregator = maps.aggregator(k)
        self._fields = maps.aggregator_registers(k)

    def set_phantom_queue(self, port: int, rate_bps: float, limit_packets: int) -> None:
        """Port ``port``'s phantom queue drains at ``rate_bps``, its link's rate (0: no phantom
        queue, the port never marks), and holds at most ``limit_packets`` frames, as its link's
        real queue (0: no limit); it restarts empty. The one ATP call only this target has
        (switches/atp/programming.py has the others)."""
        self.register_write(maps.PHANTOM_QUEUE_RATE, port, maps.phantom_queue_rate(rate_bps))
        self.register_write(maps.PHANTOM_QUEUE_LIMIT, port, limit_packets)

    def _load_schema(self) -> ProgramSchema:
        return maps.program_schema(self.k, self._maps[maps.AGGREGATOR_MAP].max_entries)

    def _aggregators(self) -> list:
        cells = self._maps[maps.AGGREGATOR_MAP]
        return [self._aggregator.from_buffer_copy(cells.lookup(u32_key(i), BPF_F_LOCK)) for i in range(cells.max_entries)]

    def _register_read(self, register: str) -> list[int]:
        if register in self.thresholds:
            return self._threshold_read(register)
        if register in maps.PHANTOM_QUEUE_FIELDS:
            queues, field = self._maps[maps.PHANTOM_QUEUE_MAP], maps.PHANTOM_QUEUE_FIELDS[register]
            return [getattr(self._phantom_queue(port), field) for port in range(queues.max_entries)]
        field, element = self._fields[register]
        if element is None:
            return [getattr(cell, field) for cell in self._aggregators()]
        return [cell.value[element] for cell in self._aggregators()]

    def _register_write(self, register: str, index: int, value: int) -> None:
        if register in self.thresholds:
            self._threshold_write(register, value)
        elif register in maps.PHANTOM_QUEUE_FIELDS:
            queue = self._phantom_queue(index)
            setattr(queue, maps.PHANTOM_QUEUE_FIELDS[register], value)
            queue.busy_until_ns = 0
            self._maps[maps.PHANTOM_QUEUE_MAP].update(u32_key(index), bytes(queue), BPF_F_LOCK)
        else:
            self._write_cells(register, range(index, index + 1), value)

    def _phantom_queue(self, port: int) -> maps.PhantomQueue:
        return maps.PhantomQueue.from_buffer_copy(self._maps[maps.PHANTOM_QUEUE_MAP].lookup(u32_key(port), BPF_F_LOCK))

    def _write_cells(self, register: str, indices: range, value: int) -> None:
        field, element = self._fields[register]
        cells = self._maps[maps.AGGREGATOR_MAP]
        for index in indices:
            cell = self._aggregator.from_buffer_copy(cells.lookup(u32_key(index), BPF_F_LOCK))
            if element is None:
                setattr(cell, field, value)
            else:
                cell.value[element] = value
            cells.update(u32_key(index), bytes(cell), BPF_F_LOCK)

    def _register_reset(self, register: str) -> None:
        if register in self.thresholds:
            self._threshold_write(register, 0)
        elif register in maps.PHANTOM_QUEUE_FIELDS:
            for port in range(maps.PORT_NUMBERS):
                self._register_write(register, port, 0)
        else:
            self._write_cells(register, range(self._maps[maps.AGGREGATOR_MAP].max_entries), 0)

    def _registers_reset(self, registers: Sequence[str]) -> None:
        """Every aggregator zeroed with one map update each when ``registers`` name all of its
        fields, instead of a read-modify-write of every aggregator per register."""
        others = [r for r in registers if r not in self._fields]
        if set(registers) - set(others) != set(self._fields):
            super()._registers_reset(registers)
            return
        for register in others:
            self._register_reset(register)
        cells = self._maps[maps.AGGREGATOR_MAP]
        empty = bytes(self._aggregator())
        for index in range(cells.max_entries):
            cells.update(u32_key(index), empty, BPF_F_LOCK)
