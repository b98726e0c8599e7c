"""Register arrays and packet/byte counters with P4 semantics (bit<32> cells, wrap-around).

The data path touches these on every packet, so each keeps its cells in the cheapest form
for that use: plain Python lists for the scalar registers (an index into a list is several
times faster than into a numpy array), and one native int32 matrix for all value_XX
registers so a whole packet is added with one numpy call. The control plane always sees
the P4 view: ``read`` returns unsigned bit<32> Python ints, ``write`` takes them.
"""

from __future__ import annotations

import numpy as np

from switches.control import check_register_cell

BIT32 = 0xFFFFFFFF


class CellRegister:
    """``register<bit<32>>(size)`` as a list of ints the data path indexes directly."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.size = size
        self.cells = [0] * size

    def read(self) -> list[int]:
        return list(self.cells)

    def write(self, index: int, value: int) -> None:
        check_register_cell(self.name, self.size, 32, index, value)
        self.cells[index] = value

    def reset(self) -> None:
        self.cells[:] = [0] * self.size


class ExponentRegister(CellRegister):
    """The exponent register: an int8 in the low byte of a bit<32> cell.

    Cells hold the signed value so the data path's max() is the P4 program's signed int8
    compare; reads give the low byte as bit<32> (Python sign-extends it), writes keep the
    low byte as int8.
    """

    def read(self) -> list[int]:
        return [cell & 0xFF for cell in self.cells]

    def write(self, index: int, value: int) -> None:
        check_register_cell(self.name, self.size, 32, index, value)
        self.cells[index] = ((value & 0xFF) ^ 0x80) - 0x80


class ValueRegisters:
    """All value_XX registers as one (cells, k) int32 matrix; column XX is value_XX.

    int32 addition in numpy wraps modulo 2^32 exactly like bit<32> arithmetic; ``rows``
    holds a precomputed view per cell so the data path never creates array objects.
    """

    def __init__(self, prefix: str, size: int, k: int) -> None:
        self.size = size
        self.k = k
        self.matrix = np.zeros((size, k), dtype=np.int32)
        self.rows = list(self.matrix)
        self.names = {f"{prefix}.value_{i:02d}": i for i in range(k)}

    def column(self, name: str) -> "ValueColumn":
        return ValueColumn(name, self, self.names[name])

    def reset(self) -> None:
        self.matrix[:] = 0


class ValueColumn:
    """The control plane's view of one value_XX register (a column of the matrix)."""

    def __init__(self, name: str, values: ValueRegisters, column: int) -> None:
        self.name = name
        self.size = values.size
        self._column = values.matrix[:, column]

    def read(self) -> list[int]:
        return self._column.view(np.uint32).tolist()

    def write(self, index: int, value: int) -> None:
        check_register_cell(self.name, self.size, 32, index, value)
        self._column[index] = np.uint32(value).view(np.int32)

    def reset(self) -> None:
        self._column[:] = 0


Register = CellRegister | ValueColumn


class Counter:
    """``counter(size, CounterType.packets_and_bytes)``: two lists the data path bumps."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.packets = [0] * size
        self.bytes = [0] * size

    def count(self, index: int, length: int) -> None:
        self.packets[index] += 1
        self.bytes[index] += length

    def read(self) -> list[tuple[int, int]]:
        return list(zip(self.packets, self.bytes))

    def reset(self) -> None:
        self.packets[:] = [0] * len(self.packets)
        self.bytes[:] = [0] * len(self.bytes)
