"""Build a TC program with clang (-target bpf), once per distinct source and options.

Every program of the eBPF target is compiled alike: the same flags, the host's multiarch
include folder (asm/types.h, which linux/bpf.h includes, lives there), and the object
cached under a folder named by a hash of its sources and options (base/build_cache.py), so
a stale build never runs. Each program's compile.py says what its sources and options are.
"""

from __future__ import annotations

import logging
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from base.build_cache import build_once

CLANG_FLAGS = ("-O2", "-g", "-Wall", "-Werror", "-target", "bpf")


class EbpfCompileError(RuntimeError):
    """clang refused the program; the message carries its output verbatim."""


def system_includes() -> list[str]:
    """The host's multiarch include folder, which linux/bpf.h needs."""
    return ["-I", f"/usr/include/{platform.machine()}-linux-gnu"]


def clang_once(output_dir: Path, obj: str, clang: str, command: Callable[[Path], list[str]], what: str,
               log: logging.Logger, prepare: Callable[[Path], None] = lambda staging: None) -> Path:
    """``output_dir / obj``, running ``command(staging)`` (after ``prepare(staging)``) only if
    this build is not cached; ``what`` names the build in ``log``."""
    if not (output_dir / obj).exists() and shutil.which(clang) is None:
        raise EbpfCompileError(f"clang not found ({clang!r} is not on PATH); run scripts/bootstrap.sh")

    def run_clang(staging: Path) -> None:
        log.info("building %s (first use; cached in %s)", what, output_dir)
        prepare(staging)
        line = command(staging)
        log.info("clang: %s", " ".join(line))
        result = subprocess.run(line, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise EbpfCompileError(f"clang failed (exit {result.returncode}): {' '.join(line)}\n{result.stdout}{result.stderr}")

    try:
        return build_once(output_dir, obj, run_clang)
    except FileNotFoundError as error:
        raise EbpfCompileError(str(error)) from error
