"""What the control plane sees of a program on the embedded switch: tables, registers and
counters by their P4 names, and the schema it checks requests against.

Any protocol's pipeline (SwitchML's, ATP's) fills ``_tables``, ``_registers`` and
``_counters`` and inherits this view, so the control plane asks every program alike.
"""

from __future__ import annotations

from switches.control import ProgramSchema, RegisterSchema, lookup
from switches.embedded.registers import Counter, Register
from switches.embedded.tables import ExactMatchTable


class ProgramView:
    _tables: dict[str, ExactMatchTable]
    _registers: dict[str, Register]
    _counters: dict[str, Counter]

    def table(self, name: str) -> ExactMatchTable:
        return lookup(self._tables, name, "table")

    def register(self, name: str) -> Register:
        return lookup(self._registers, name, "register")

    def counter(self, name: str) -> Counter:
        return lookup(self._counters, name, "counter")

    def schema(self) -> ProgramSchema:
        """Every table, register (bit<32> cells) and counter, as the control plane checks them."""
        return ProgramSchema(
            tables={name: table.schema() for name, table in self._tables.items()},
            registers={name: RegisterSchema(register.size, 32) for name, register in self._registers.items()},
            counters={name: len(counter.packets) for name, counter in self._counters.items()},
        )
