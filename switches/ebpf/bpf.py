"""BPF maps from Python through the bpf(2) system call (ctypes, no compiled extension).

The control plane reads and writes the eBPF switch's maps element by element, and a
register reset touches every slot: one system call per element costs microseconds, a
bpftool process per element would cost milliseconds. No library on PyPI or in Debian
does this for maps created by another loader without pulling in a compiler toolchain
(bcc), so this module wraps the few commands the control plane needs: open a map by
pinned path or by id, ask its sizes, and look up, update, delete and iterate elements.
Keys and values are bytes in the C program's layout (see maps.py).
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from pathlib import Path
from typing import Iterator

BPF_SYSCALL = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "s390x": 351, "ppc64le": 361}
"""__NR_bpf per architecture (the syscall number is not in Python's standard library)."""

BPF_MAP_CREATE = 0
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_MAP_DELETE_ELEM = 3
BPF_MAP_GET_NEXT_KEY = 4
BPF_OBJ_GET = 7
BPF_MAP_GET_FD_BY_ID = 14
BPF_OBJ_GET_INFO_BY_FD = 15
BPF_PROG_BIND_MAP = 35

BPF_MAP_TYPE_ARRAY = 2
BPF_MAP_TYPE_PERCPU_HASH = 5
BPF_MAP_TYPE_PERCPU_ARRAY = 6
PERCPU_TYPES = (BPF_MAP_TYPE_PERCPU_HASH, BPF_MAP_TYPE_PERCPU_ARRAY)

BPF_ANY = 0
BPF_NOEXIST = 1
BPF_EXIST = 2
BPF_F_LOCK = 4
"""Copy a value that holds a bpf_spin_lock under that lock (the lock itself is not copied)."""

BPF_OBJ_NAME_LEN = 16
POSSIBLE_CPUS = Path("/sys/devices/system/cpu/possible")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _ElemAttr(ctypes.Structure):
    """union bpf_attr for BPF_MAP_*_ELEM and BPF_MAP_GET_NEXT_KEY."""

    _fields_ = [("map_fd", ctypes.c_uint32), ("pad", ctypes.c_uint32), ("key", ctypes.c_uint64), ("value", ctypes.c_uint64), ("flags", ctypes.c_uint64)]


class _ObjGetAttr(ctypes.Structure):
    _fields_ = [("pathname", ctypes.c_uint64), ("bpf_fd", ctypes.c_uint32), ("file_flags", ctypes.c_uint32)]


class _GetFdByIdAttr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_uint32), ("next_id", ctypes.c_uint32), ("open_flags", ctypes.c_uint32)]


class _InfoAttr(ctypes.Structure):
    _fields_ = [("bpf_fd", ctypes.c_uint32), ("info_len", ctypes.c_uint32), ("info", ctypes.c_uint64)]


class _MapCreateAttr(ctypes.Structure):
    _fields_ = [("map_type", ctypes.c_uint32), ("key_size", ctypes.c_uint32), ("value_size", ctypes.c_uint32), ("max_entries", ctypes.c_uint32)]


class _BindMapAttr(ctypes.Structure):
    _fields_ = [("prog_fd", ctypes.c_uint32), ("map_fd", ctypes.c_uint32), ("flags", ctypes.c_uint32)]


class MapInfo(ctypes.Structure):
    """The head of struct bpf_map_info (the kernel fills what fits)."""

    _fields_ = [
        ("type", ctypes.c_uint32),
        ("id", ctypes.c_uint32),
        ("key_size", ctypes.c_uint32),
        ("value_size", ctypes.c_uint32),
        ("max_entries", ctypes.c_uint32),
        ("map_flags", ctypes.c_uint32),
        ("name", ctypes.c_char * BPF_OBJ_NAME_LEN),
    ]


def bpf(command: int, attr: ctypes.Structure) -> int:
    """One bpf(2) call; OSError with the kernel's errno on failure."""
    number = BPF_SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"bpf(2) syscall number unknown for {platform.machine()}")
    result = _libc.syscall(number, command, ctypes.byref(attr), ctypes.sizeof(attr))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))
    return result


def open_pinned(path: Path) -> int:
    """A file descriptor of the program or map pinned at ``path``."""
    name = ctypes.create_string_buffer(str(path).encode())
    return bpf(BPF_OBJ_GET, _ObjGetAttr(ctypes.addressof(name), 0, 0))


def bind_map(prog_fd: int, map_fd: int) -> None:
    """Make the program hold the map, as it holds the maps its code uses: a map only the
    control plane uses then lives exactly as long as the program."""
    bpf(BPF_PROG_BIND_MAP, _BindMapAttr(prog_fd, map_fd, 0))


def possible_cpus() -> int:
    """Cells of a per-CPU value: one per possible CPU ('0-1' -> 2), as the kernel sizes them."""
    count = 0
    for part in POSSIBLE_CPUS.read_text().strip().split(","):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return count


def probe_bpf_syscall() -> None:
    """Create and close a one-cell array map: raises OSError where bpf(2) is refused."""
    os.close(bpf(BPF_MAP_CREATE, _MapCreateAttr(BPF_MAP_TYPE_ARRAY, 4, 4, 1)))


class BpfMap:
    """An open BPF map (a file descriptor) with its sizes."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        info = MapInfo()
        bpf(BPF_OBJ_GET_INFO_BY_FD, _InfoAttr(fd, ctypes.sizeof(info), ctypes.addressof(info)))
        self.id = info.id
        self.type = info.type
        self.key_size = info.key_size
        self.value_size = info.value_size
        self.max_entries = info.max_entries
        self.name = info.name.decode()
        percpu = info.type in PERCPU_TYPES
        self.cpus = possible_cpus() if percpu else 1
        self._value_stride = (self.value_size + 7) // 8 * 8 if percpu else self.value_size
        """Bytes per CPU cell: the kernel rounds per-CPU values up to 8 bytes."""

    @classmethod
    def from_pin(cls, path: Path) -> "BpfMap":
        return cls(open_pinned(path))

    @classmethod
    def from_id(cls, map_id: int) -> "BpfMap":
        return cls(bpf(BPF_MAP_GET_FD_BY_ID, _GetFdByIdAttr(map_id, 0, 0)))

    def _elem(self, command: int, key: bytes, value: ctypes.Array | None, flags: int) -> None:
        if len(key) != self.key_size:
            raise ValueError(f"map {self.name}: key of {len(key)} bytes, want {self.key_size}")
        key_buffer = ctypes.create_string_buffer(key, len(key))
        value_address = 0 if value is None else ctypes.addressof(value)
        bpf(command, _ElemAttr(self.fd, 0, ctypes.addressof(key_buffer), value_address, flags))

    def lookup(self, key: bytes, flags: int = 0) -> bytes | None:
        """The value (all CPUs' cells, back to back, for a per-CPU map), or None if absent."""
        value = ctypes.create_string_buffer(self._value_stride * self.cpus)
        try:
            self._elem(BPF_MAP_LOOKUP_ELEM, key, value, flags)
        except FileNotFoundError:
            return None
        return value.raw

    def lookup_percpu(self, key: bytes) -> list[bytes]:
        """One value per possible CPU."""
        raw = self.lookup(key)
        if raw is None:
            return []
        stride = self._value_stride
        return [raw[cpu * stride : cpu * stride + self.value_size] for cpu in range(self.cpus)]

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        """Write ``value`` (for a per-CPU map: written to every CPU's cell)."""
        if len(value) != self.value_size:
            raise ValueError(f"map {self.name}: value of {len(value)} bytes, want {self.value_size}")
        padded = value.ljust(self._value_stride, b"\0") * self.cpus
        self._elem(BPF_MAP_UPDATE_ELEM, key, ctypes.create_string_buffer(padded, len(padded)), flags)

    def delete(self, key: bytes) -> None:
        self._elem(BPF_MAP_DELETE_ELEM, key, None, 0)

    def keys(self) -> Iterator[bytes]:
        """Every key, in the kernel's order (collect them before deleting any)."""
        next_key = ctypes.create_string_buffer(self.key_size)
        key: ctypes.Array | None = None
        while True:
            attr = _ElemAttr(self.fd, 0, 0 if key is None else ctypes.addressof(key), ctypes.addressof(next_key), 0)
            try:
                bpf(BPF_MAP_GET_NEXT_KEY, attr)
            except FileNotFoundError:
                return
            yield next_key.raw
            key = ctypes.create_string_buffer(next_key.raw, self.key_size)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "BpfMap":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
