"""What every native worker loop shares: the C compiler, the cached build, the struct check.

An in-network protocol whose Python worker cannot keep up with its links has a C translation
of its worker core (hosts/<protocol>/native/worker.c), loaded with ctypes and chosen by the
config's ``protocol.data_path``. Each is built the same way, here: once per distinct source,
headers and compiler, cached under ``build/native/<hash>/`` (base/build_cache.py), with
``$CC``, else the first of ``cc``, ``clang``, ``gcc`` on the PATH. The headers beside this file are what every such worker
includes: ``mmsg.h``, the C side of hosts/mmsg.py, and ``worker.h``, its fields table and send timeline.

Each worker declares the struct Python fills in its worker.c and mirrors it with ctypes; the
library reports its size and every field's offset (``<prefix>_field_offset``), and
``layout_differences`` finds where the two disagree, so a mismatch is refused at load.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from base.build_cache import build_once, source_hash
from base.tool_version import first_line
from methods.aggregation import DataPath, DataPathUnavailable
from protocol import params

log = logging.getLogger(__name__)

HEADERS = Path(__file__).parent
"""This folder: ``mmsg.h`` and ``worker.h``, on every native worker's include path."""
BUILD_ROOT = params.BUILD_DIR / "native"
COMPILERS = ("cc", "clang", "gcc")
MAX_ERRNOS = 16
"""mmsg.h's MAX_ERRNOS: the errno tables' room in a worker's struct."""
DATA_PATHS = ("auto", "native", "python")
"""The config's ``protocol.data_path``: ``auto`` is native where it builds, else Python."""


class NativeUnavailable(DataPathUnavailable):
    """A native data path cannot be built or loaded here; the message says why."""


def compiler() -> str | None:
    """``$CC`` if set, else the first of COMPILERS on the PATH (None: none is)."""
    if os.environ.get("CC"):
        return os.environ["CC"]
    return next((cc for cc in COMPILERS if shutil.which(cc)), None)


def compile_command(cc: str, output: Path, source: Path, include_dirs: tuple[Path, ...]) -> list[str]:
    """The compiler's command line (also what a reader would type to build it by hand).

    No -ffast-math and no contraction into fused multiply-adds: quantized values must be
    numpy's, bit for bit."""
    includes = [arg for folder in (*include_dirs, HEADERS) for arg in ("-I", str(folder))]
    return [cc, "-O3", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno",
            *includes, str(source), "-o", str(output), "-lm"]


def build(source: Path, library: str, inputs: tuple[Path, ...], include_dirs: tuple[Path, ...], cc: str | None = None,
          build_root: Path = BUILD_ROOT) -> Path:
    """Path of the shared library ``library`` built from ``source``, compiling it only if
    ``source``, the files it includes (``inputs``, besides this folder's headers) and this
    compiler have no build yet."""
    cc = cc or compiler()
    if cc is None:
        raise NativeUnavailable(f"no C compiler ($CC, or one of {', '.join(COMPILERS)} on the PATH; scripts/bootstrap.sh installs clang)")
    sources = dict.fromkeys((source, *inputs, *sorted(HEADERS.glob("*.h"))))
    output_dir = build_root / source_hash([(path.name, path) for path in sources],
                                          " ".join(compile_command(cc, Path(library), source, include_dirs)))

    def run_compiler(staging: Path) -> None:
        command = compile_command(cc, staging / library, source, include_dirs)
        log.info("building %s (first use; cached in %s): %s", source.name, output_dir, " ".join(command))
        try:
            result = subprocess.run(command, capture_output=True, text=True, check=False)
        except OSError as exc:
            raise NativeUnavailable(f"{cc} could not be run: {exc}") from exc
        if result.returncode != 0:
            first = (result.stderr or result.stdout).strip().splitlines()
            raise NativeUnavailable(f"{cc} failed (exit {result.returncode}): {first[0] if first else 'no output'}")

    try:
        return build_once(output_dir, library, run_compiler)
    except OSError as exc:  # no build and no right to make one (another user's checkout), or a broken entry
        raise NativeUnavailable(f"{output_dir}: {exc.strerror or exc}") from exc


def load(path: Path) -> ctypes.CDLL:
    """The library at ``path`` (NativeUnavailable if it does not load)."""
    try:
        return ctypes.CDLL(str(path))
    except OSError as exc:
        raise NativeUnavailable(f"{path} does not load: {exc}") from exc


def choose(choice: str, library: Callable[[], ctypes.CDLL], source: str) -> DataPath:
    """The data path for the config's ``choice`` (one of DATA_PATHS): ``native`` must build
    (``library()`` loads it; NativeUnavailable otherwise), ``auto`` falls back to Python where
    it does not, ``python`` is Python. ``source``: the worker.c it names."""
    if choice not in DATA_PATHS:
        raise ValueError(f"data_path must be one of {', '.join(DATA_PATHS)}, got {choice!r}")
    if choice == "python":
        return DataPath("python", "the Python worker (protocol.data_path: python)")
    try:
        library()
    except NativeUnavailable as exc:
        if choice == "native":
            raise
        return DataPath("python", f"the Python worker: the native data path is not available ({exc})")
    return DataPath("native", f"the native data path ({choice}: {source})")


def tool_versions(data_path: str) -> dict[str, str | None]:
    """The C compiler a native loop was built with, where it ran (``Aggregation.tool_versions``:
    a run's provenance records it)."""
    cc = compiler()
    return {f"native worker compiler ({cc})": first_line([cc, "--version"])} if data_path == "native" and cc is not None else {}


def layout_differences(lib: ctypes.CDLL, prefix: str, sizes: dict[type[ctypes.Structure], int],
                       structs: dict[str, type[ctypes.Structure]]) -> list[str]:
    """Where a worker.c and its ctypes mirrors disagree: a size (``sizes``: mirror -> C's
    size), a field's offset (``<prefix>_field_offset("struct.field")``, -1 where C lacks it), a
    field only one side has (``<prefix>_field_count``). Empty when they agree."""
    field_offset, field_count = getattr(lib, f"{prefix}_field_offset"), getattr(lib, f"{prefix}_field_count")
    differences = [f"struct {mirror.__name__} is {size} bytes in worker.c and {ctypes.sizeof(mirror)} in Python"
                   for mirror, size in sizes.items() if ctypes.sizeof(mirror) != size]
    names = [(c_name, name, getattr(struct, name).offset) for c_name, struct in structs.items() for name, *_ in struct._fields_]
    for c_name, name, offset in names:
        if (c_offset := field_offset(f"{c_name}.{name}".encode())) != offset:
            where = "missing" if c_offset < 0 else f"at offset {c_offset}"
            differences.append(f"{c_name}.{name} is {where} in worker.c and at {offset} in Python")
    if field_count() != len(names):
        differences.append(f"worker.c lists {field_count()} fields of these structs, Python {len(names)}")
    return differences
