"""The native worker data path: worker.c, built at first use and loaded with ctypes.

The per-packet loop of a SwitchML worker (slots, quantized sends, results into the output
blocks, the exponent lead round, timers and retransmission, sendmmsg/recvmmsg batches) is
worker.c, a translation of hosts/switchml/core.py and job.py's driver. Everything around
the loop stays Python: the job plan, the block exponents, the checks of the tensor,
dequantization, verification (hosts/switchml/native/job.py).

Why ctypes, not a CPython extension or cffi: the library is called once per all-reduce,
so the cost of a call does not matter, and ctypes needs nothing beyond the C compiler
that scripts/bootstrap.sh installs for the eBPF switch (an extension needs Python's
headers, cffi a package). The struct the two sides share is declared in worker.c and
mirrored in job.py; the library reports its size and every field's offset, and a mismatch is
refused at load.

The library is built like the eBPF object, by hosts/native's helper (which every native
worker shares, with its C header mmsg.h): once per distinct source and compiler, cached
under ``build/native/<hash>/`` (base/build_cache.py), with ``$CC``, else the first of
``cc``, ``clang``, ``gcc`` on the PATH. Where none builds it (no compiler, no C library
headers, an unusual platform), ``auto`` falls back to the Python worker and says why in
one line (``resolve``).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import hosts.native as native
from hosts.native import BUILD_ROOT, DATA_PATHS, NativeUnavailable, compiler, tool_versions
from methods.aggregation import DataPath
from protocol.switchml import params as switchml_params

SOURCE = Path(__file__).with_name("worker.c")
LIBRARY = "libswitchml_worker.so"
INCLUDE_DIRS = (switchml_params.CONSTANTS_P4.parent, SOURCE.parent)
STANDS_IN_FOR = ("hosts/switchml/core.py", "hosts/switchml/job.py", "hosts/switchml/timers.py", "protocol/quantize.py")
"""The Python code whose work the native loop does in C (quantize.py: ``quantize``; the block
exponents stay Python). A lab that has a student write part of these runs its configs with
``protocol.data_path: python``, or the student's code would not be what ran."""


def compile_command(cc: str, output: Path, source: Path = SOURCE) -> list[str]:
    """The compiler's command line (hosts/native's, with constants.p4's folder and this one on
    the include path). ``source`` is worker.c or a file that includes it (simulation/switchml/native/star.c)."""
    return native.compile_command(cc, output, source, INCLUDE_DIRS)


def build(cc: str | None = None, build_root: Path = BUILD_ROOT, source: Path = SOURCE, library: str = LIBRARY) -> Path:
    """Path of the shared library built from ``source`` (worker.c, or a file that includes
    it), compiling it only if these sources and this compiler have no build yet."""
    return native.build(source, library, (SOURCE, switchml_params.CONSTANTS_P4), INCLUDE_DIRS, cc, build_root)


@functools.cache
def library() -> ctypes.CDLL:
    """worker.c, built and loaded once per process (NativeUnavailable if it cannot be)."""
    from hosts.switchml.native.job import declare

    lib = native.load(build())
    declare(lib)
    return lib


@functools.cache
def resolve(choice: str) -> DataPath:
    """The data path for the config's ``choice``: ``native`` must build (NativeUnavailable
    otherwise), ``auto`` falls back to Python where it does not, ``python`` is Python."""
    return native.choose(choice, library, "hosts/switchml/native/worker.c")

__all__ = ["DATA_PATHS", "LIBRARY", "SOURCE", "STANDS_IN_FOR", "NativeUnavailable", "build", "compile_command", "compiler", "library",
           "resolve", "tool_versions"]
