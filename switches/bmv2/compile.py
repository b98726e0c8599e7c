"""Compile p4/switchml.p4 for bmv2 (v1model) with p4c, once per distinct source and options.

Every switch node of every run needs the same JSON; compiling takes a second or more per
call (about 10 s at k = 256). The build is cached under a hash of every file under ``p4/``
plus the compiler options (``base/build_cache.py``): an edit, another k or another pool
size gets a fresh build, an unchanged tree reuses the existing one.

A build is two steps, both logged as the commands a student would type: p4/gen_elements.py
writes the per-element code for the build's k into the build's own ``include/``, and p4c
compiles with that directory first on its include path and ``-DSWITCHML_K=k``.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from protocol import params
from protocol.switchml import params as switchml_params
from base.build_cache import build_once, source_hash

log = logging.getLogger(__name__)

P4_DIR = params.P4_DIR
P4_MAIN = P4_DIR / "switchml.p4"
P4_INCLUDE = P4_DIR / "include"
GENERATOR = P4_DIR / "gen_elements.py"
BUILD_ROOT = params.BUILD_DIR / "p4"

MAX_SLOT_LIMIT = 0xFFFF
"""switchml_h.slot is 16 bits wide, and the P4 program compares it with the pool size."""


class P4CompileError(RuntimeError):
    """p4c rejected the program; the message carries the compiler's output verbatim."""


@dataclass(frozen=True, kw_only=True)
class CompileOptions:
    """Everything besides the sources that changes the compiled program."""

    k: int
    max_pool_size: int = switchml_params.MAX_POOL_SIZE
    p4c: str = "p4c"

    def __post_init__(self) -> None:
        if not 1 <= self.max_pool_size <= MAX_SLOT_LIMIT:
            raise ValueError(f"max_pool_size must be within 1..{MAX_SLOT_LIMIT}, got {self.max_pool_size}")
        if self.k not in switchml_params.K_CHOICES:
            raise ValueError(f"k must be one of {switchml_params.K_CHOICES}, got {self.k}")

    def defines(self) -> list[str]:
        return [f"-DSWITCHML_MAX_POOL_SIZE={self.max_pool_size}", f"-DSWITCHML_K={self.k}"]

    def generate_command(self, output_dir: Path) -> list[str]:
        """The command that writes the per-element code for this k into ``output_dir/include``."""
        return [sys.executable, str(GENERATOR), "--k", str(self.k), "--out", str(output_dir / "include")]

    def command(self, output_dir: Path) -> list[str]:
        """The p4c command line (also what a student would type by hand)."""
        return [
            self.p4c,
            "--target", "bmv2",
            "--arch", "v1model",
            "-I", str(output_dir / "include"),
            "-I", str(P4_INCLUDE),
            *self.defines(),
            "-o", str(output_dir),
            str(P4_MAIN),
        ]  # fmt: skip


def source_files(p4_dir: Path = P4_DIR) -> list[Path]:
    """Every regular file under p4/, in a stable order (sources, generator, README alike:
    hashing a little too much only costs a rebuild, hashing too little runs stale code)."""
    return sorted(p for p in p4_dir.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def build_hash(options: CompileOptions, p4_dir: Path = P4_DIR) -> str:
    """Hash of the sources (path and content) and the options; names the output directory."""
    files = [(path.relative_to(p4_dir).as_posix(), path) for path in source_files(p4_dir)]
    return source_hash(files, repr((options.defines(), options.p4c)))


def first_error(output: str) -> str:
    """p4c's first error line (``file(line): ... error: ...``, paths relative to the tree), else
    its last line: it leads the exception's message, because a test report shows one line."""
    lines = [line.strip().replace(f"{params.REPO_ROOT}/", "") for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[0]


def compile_p4(options: CompileOptions, build_root: Path = BUILD_ROOT) -> Path:
    """Path of switchml.json for ``options``, compiling only if this build is not cached."""
    output_dir = build_root / build_hash(options)
    json_name = f"{P4_MAIN.stem}.json"
    if (output_dir / json_name).exists():
        log.debug("p4c: using cached %s", output_dir / json_name)
    elif shutil.which(options.p4c) is None:
        raise P4CompileError(f"p4c not found ({options.p4c!r} is not on PATH); see docs/targets.md")

    def run_p4c(staging: Path) -> None:
        log.info("building the P4 program for k = %d, pool %d (first use; cached in %s)", options.k, options.max_pool_size, output_dir)
        generate = options.generate_command(staging)
        log.info("generate: %s", " ".join(generate))
        generated = subprocess.run(generate, capture_output=True, text=True, cwd=params.REPO_ROOT, check=False)
        if generated.returncode != 0:
            raise P4CompileError(f"p4/gen_elements.py failed (exit {generated.returncode}): {generated.stderr.strip()}")
        command = options.command(staging)
        log.info("p4c: %s", " ".join(command))
        result = subprocess.run(command, capture_output=True, text=True, cwd=params.REPO_ROOT, check=False)
        if result.returncode != 0 or not (staging / json_name).exists():
            output = f"{result.stdout}{result.stderr}"
            raise P4CompileError(f"p4c: {first_error(output)} (exit {result.returncode})\n{' '.join(command)}\n{output}")
        if result.stderr:
            log.warning("p4c: %s", result.stderr.strip())

    try:
        return build_once(output_dir, json_name, run_p4c)
    except FileNotFoundError as error:
        raise P4CompileError(str(error)) from error
