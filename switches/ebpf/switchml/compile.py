"""Compile switchml.bpf.c with clang (-target bpf), once per distinct source and options.

The object is cached under ``build/ebpf/<hash of the sources and options>/`` like the
bmv2 build (``base/build_cache.py``). The sources are the C file, its header and
p4/switchml/include/constants.p4, which the C program includes as is: the port range, the message
types and the counter indices have one definition for all three targets. k and the pool
size are options (``-DSWITCHML_K``, ``-DSWITCHML_MAX_POOL_SIZE``, which constants.p4 takes
over its defaults), so there is one cached object per k and pool size, built on first use
(a second or two).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from protocol import params
from protocol.switchml import params as switchml_params
from protocol.switchml.packet import MAX_SLOT_LIMIT
from base.build_cache import source_hash
from switches.ebpf.clang import CLANG_FLAGS, clang_once, system_includes
from switches.ebpf.map_control import TC_SWITCH_H
from switches.ebpf.switchml.maps import EBPF_DIR, SWITCHML_H

log = logging.getLogger(__name__)

SOURCE = EBPF_DIR / "switchml.bpf.c"
SOURCES = (SOURCE, SWITCHML_H, TC_SWITCH_H, switchml_params.CONSTANTS_P4)
OBJECT = "switchml.bpf.o"
BUILD_ROOT = params.BUILD_DIR / "ebpf"


@dataclass(frozen=True, kw_only=True)
class CompileOptions:
    """Everything besides the sources that changes the compiled program."""

    k: int
    max_pool_size: int = switchml_params.MAX_POOL_SIZE
    clang: str = "clang"

    def __post_init__(self) -> None:
        if not 1 <= self.max_pool_size <= MAX_SLOT_LIMIT:
            raise ValueError(f"max_pool_size must be within 1..{MAX_SLOT_LIMIT}, got {self.max_pool_size}")
        if self.k not in switchml_params.K_CHOICES:
            raise ValueError(f"k must be one of {switchml_params.K_CHOICES}, got {self.k}")

    def command(self, output: Path) -> list[str]:
        """The clang command line (also what a student would type by hand)."""
        return [
            self.clang, *CLANG_FLAGS,
            "-I", str(switchml_params.CONSTANTS_P4.parent), "-I", str(EBPF_DIR), "-I", str(TC_SWITCH_H.parent), *system_includes(),
            f"-DSWITCHML_MAX_POOL_SIZE={self.max_pool_size}", f"-DSWITCHML_K={self.k}",
            "-c", str(SOURCE), "-o", str(output),
        ]  # fmt: skip


def build_hash(options: CompileOptions) -> str:
    files = [(path.name, path) for path in SOURCES]
    return source_hash(files, repr((options.max_pool_size, options.k, options.clang)))


def compile_program(options: CompileOptions, build_root: Path = BUILD_ROOT) -> Path:
    """Path of the BPF object for ``options``, compiling only if this build is not cached."""
    what = f"the eBPF program for k = {options.k}, pool {options.max_pool_size}"
    return clang_once(build_root / build_hash(options), OBJECT, options.clang, lambda staging: options.command(staging / OBJECT),
                      what, log)
