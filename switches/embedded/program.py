"""A protocol's program on the embedded switch: what the switch process runs
(``PortProgram``) and what the control plane sees of it (``ProgramView``: tables, registers
and counters by their P4 names, and the schema it checks requests against).

Any protocol's pipeline (SwitchML's, ATP's) fills ``_tables``, ``_registers`` and
``_counters`` and inherits this view, so the control plane asks every program alike. The
target lists each protocol's program class (``PROGRAMS`` in switches/embedded/__init__.py),
and the switch process is told which to build (``--program``).
"""

from __future__ import annotations

from typing import Protocol

from switches.control import ProgramSchema, RegisterSchema, lookup
from switches.embedded.registers import Counter, Register
from switches.embedded.tables import ExactMatchTable
from switches.embedded.traffic_manager import TrafficManager
from switches.target import Transmit


class PortProgram(Protocol):
    """A protocol's program as the switch process runs it on real ports (switch.py), built
    as ``cls(k=, max_pool_size=, seed=)``: each frame is received into ``frame`` and run by
    ``process``, which sends what leaves through ``ports``. Whatever is not the protocol's
    it forwards as ordinary traffic (the baselines run on whichever program is loaded)."""

    frame: bytearray
    """The buffer every received frame is written into (the largest frame fits)."""
    ports: dict[int, Transmit]
    """Port number -> its transmit function, filled by the switch process."""
    tx_errors: int
    """Frames the kernel refused to send (full queue, too large), counted by ``process``."""
    traffic_manager: TrafficManager

    def process(self, in_port: int, length: int) -> None:
        """Run the frame in ``frame[:length]``, received on ``in_port``, to its ports."""

    def table(self, name: str) -> ExactMatchTable: ...

    def register(self, name: str) -> Register: ...

    def counter(self, name: str) -> Counter: ...

    def schema(self) -> ProgramSchema: ...


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
