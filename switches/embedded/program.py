"""What the control plane sees of a program on the embedded switch: tables, registers and
counters by their P4 names, and the schema it checks requests against.

Any protocol's pipeline fills ``_tables``, ``_registers`` and ``_counters`` and inherits this
view (ATP's does; SwitchMLPipeline still carries its own copy of these four methods until
in-network aggregation becomes a plug-in axis and it may be edited: hosts/atp/README.md).
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
