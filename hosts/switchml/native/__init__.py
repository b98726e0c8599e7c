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

The library is built like the eBPF object: once per distinct source and compiler, cached
under ``build/native/<hash>/`` (base/build_cache.py), with ``$CC``, else the first of
``cc``, ``clang``, ``gcc`` on the PATH. Where none builds it (no compiler, no C library
headers, an unusual platform), ``auto`` falls back to the Python worker and says why in
one line (``resolve``).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import shutil
import subprocess
from pathlib import Path

from base.build_cache import build_once, source_hash
from base.tool_version import first_line
from methods.aggregation import DataPath, DataPathUnavailable
from protocol import params
from protocol.switchml import params as switchml_params

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("worker.c")
LIBRARY = "libswitchml_worker.so"
BUILD_ROOT = params.BUILD_DIR / "native"
COMPILERS = ("cc", "clang", "gcc")
STANDS_IN_FOR = ("hosts/switchml/core.py", "hosts/switchml/job.py", "hosts/switchml/timers.py", "protocol/quantize.py")
"""The Python code whose work the native loop does in C (quantize.py: ``quantize``; the block
exponents stay Python). A lab that has a student write part of these runs its configs with
``protocol.data_path: python``, or the student's code would not be what ran."""
DATA_PATHS = ("auto", "native", "python")
"""The config's ``protocol.data_path``: ``auto`` is native where it builds, else Python."""


class NativeUnavailable(DataPathUnavailable):
    """The native data path cannot be built or loaded here; the message says why."""


def compiler() -> str | None:
    """``$CC`` if set, else the first of COMPILERS on the PATH (None: none is)."""
    if os.environ.get("CC"):
        return os.environ["CC"]
    return next((cc for cc in COMPILERS if shutil.which(cc)), None)


def compile_command(cc: str, output: Path, source: Path = SOURCE) -> list[str]:
    """The compiler's command line (also what a reader would type to build it by hand).
    ``source`` is worker.c or a file that includes it (simulation/switchml/native/star.c).

    No -ffast-math and no contraction into fused multiply-adds: the quantized values must
    be numpy's, bit for bit."""
    return [cc, "-O3", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno",
            "-I", str(switchml_params.CONSTANTS_P4.parent), "-I", str(SOURCE.parent), str(source), "-o", str(output), "-lm"]


def build(cc: str | None = None, build_root: Path = BUILD_ROOT, source: Path = SOURCE, library: str = LIBRARY) -> Path:
    """Path of the shared library built from ``source`` (worker.c, or a file that includes
    it), compiling it only if these sources and this compiler have no build yet."""
    cc = cc or compiler()
    if cc is None:
        raise NativeUnavailable(f"no C compiler ($CC, or one of {', '.join(COMPILERS)} on the PATH; scripts/bootstrap.sh installs clang)")
    sources = dict.fromkeys((source, SOURCE, switchml_params.CONSTANTS_P4))
    output_dir = build_root / source_hash([(path.name, path) for path in sources], " ".join(compile_command(cc, Path(library), source)))

    def run_compiler(staging: Path) -> None:
        command = compile_command(cc, staging / library, source)
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


@functools.cache
def library() -> ctypes.CDLL:
    """worker.c, built and loaded once per process (NativeUnavailable if it cannot be)."""
    from hosts.switchml.native.job import declare

    path = build()
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise NativeUnavailable(f"{path} does not load: {exc}") from exc
    declare(lib)
    return lib


def tool_versions(data_path: str) -> dict[str, str | None]:
    """The C compiler the native loop was built with, where it ran (SwitchML's
    ``Aggregation.tool_versions``: a run's provenance records it)."""
    cc = compiler()
    return {f"native worker compiler ({cc})": first_line([cc, "--version"])} if data_path == "native" and cc is not None else {}


@functools.cache
def resolve(choice: str) -> DataPath:
    """The data path for the config's ``choice``: ``native`` must build (NativeUnavailable
    otherwise), ``auto`` falls back to Python where it does not, ``python`` is Python."""
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
    return DataPath("native", f"the native data path ({choice}: hosts/switchml/native/worker.c)")
