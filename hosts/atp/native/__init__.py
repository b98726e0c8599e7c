"""ATP's native worker data path: worker.c, built at first use and loaded with ctypes.

The per-packet work of an ATP worker (the window, the packets, results into the sums,
resends on a gap and on timeout, collisions' new indices, ECN AIMD) and the socket loop
around it (recvmmsg/sendmmsg batches, poll until the next timer) are worker.c, a
translation of hosts/atp/worker.py's ``WorkerCore`` and hosts/atp/client.py's loop.
Everything around the loop stays Python: quantization, the job's sequences and aggregator
map, dequantization, the statistics (hosts/atp/native/job.py). The config's
``protocol.data_path`` chooses it as it chooses SwitchML's native loop: ``auto`` is native
where it builds, ``native`` must build, ``python`` is the Python worker.

It is built by hosts/native's helper, the one SwitchML's native worker uses, and shares its
C socket batching (hosts/native/mmsg.h).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import hosts.native as native
from hosts.native import NativeUnavailable, compiler, tool_versions
from methods.aggregation import DataPath
from protocol.atp import params

SOURCE = Path(__file__).with_name("worker.c")
LIBRARY = "libatp_worker.so"
INCLUDE_DIRS = (params.CONSTANTS_P4.parent,)
STANDS_IN_FOR = ("hosts/atp/worker.py", "hosts/atp/client.py")
"""The Python code whose work the native loop does in C (client.py: its ``_run`` loop; the
aggregator map's ``index`` and ``adopt`` are aggregators.py's)."""


def compile_command(cc: str, output: Path) -> list[str]:
    """The compiler's command line for worker.c (hosts/native's, with constants.p4's folder on the include path)."""
    return native.compile_command(cc, output, SOURCE, INCLUDE_DIRS)


def build(cc: str | None = None, build_root: Path = native.BUILD_ROOT) -> Path:
    """Path of worker.c's shared library, compiling it only if this source and compiler have no build yet."""
    return native.build(SOURCE, LIBRARY, (params.CONSTANTS_P4,), INCLUDE_DIRS, cc, build_root)


@functools.cache
def library() -> ctypes.CDLL:
    """worker.c, built and loaded once per process (NativeUnavailable if it cannot be)."""
    from hosts.atp.native.job import declare

    lib = native.load(build())
    declare(lib)
    return lib


@functools.cache
def resolve(choice: str) -> DataPath:
    """The data path for the config's ``choice`` (ATP's ``Aggregation.data_path``)."""
    return native.choose(choice, library, "hosts/atp/native/worker.c")


__all__ = ["LIBRARY", "SOURCE", "STANDS_IN_FOR", "NativeUnavailable", "build", "compile_command", "compiler", "library", "resolve", "tool_versions"]
