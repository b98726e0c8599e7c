"""Compile p4/atp/atp.p4 for bmv2 (v1model) with p4c, once per distinct source and options.

The same two steps as SwitchML's build (switches/bmv2/compile.py), whose cache, error
handling and source listing it uses: p4/atp/gen_elements.py writes the per-value code for
the build's k into the build's own ``include/``, and p4c compiles with that directory first
on its include path, ``-DATP_K=k`` and ``-DATP_POOL_SIZE=n``. The build is cached under a
hash of every file under p4/atp/ and the options, both steps logged as the commands a
student would type.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from base.build_cache import build_once, source_hash
from protocol import params as shared_params
from protocol.atp import params
from switches.bmv2.compile import P4CompileError, first_error, source_files

log = logging.getLogger(__name__)

P4_DIR = params.ATP_P4_DIR
P4_MAIN = P4_DIR / "atp.p4"
P4_INCLUDE = P4_DIR / "include"
GENERATOR = P4_DIR / "gen_elements.py"
BUILD_ROOT = shared_params.BUILD_DIR / "p4-atp"


@dataclass(frozen=True, kw_only=True)
class ATPCompileOptions:
    """Everything besides the sources that changes the compiled program."""

    k: int
    pool_size: int = params.DEFAULT_POOL_SIZE
    p4c: str = "p4c"

    def __post_init__(self) -> None:
        if self.k not in params.K_CHOICES:
            raise ValueError(f"k must be one of {params.K_CHOICES}, got {self.k}")
        if not 1 <= self.pool_size <= params.MAX_POOL_SIZE:
            raise ValueError(f"ATP pool size must be 1..{params.MAX_POOL_SIZE}, got {self.pool_size}")

    def defines(self) -> list[str]:
        return [f"-DATP_POOL_SIZE={self.pool_size}", f"-DATP_K={self.k}"]

    def generate_command(self, output_dir: Path) -> list[str]:
        """The command that writes the per-value code for this k into ``output_dir/include``."""
        return [sys.executable, str(GENERATOR), "--k", str(self.k), "--out", str(output_dir / "include")]

    def command(self, output_dir: Path) -> list[str]:
        """The p4c command line (also what a student would type by hand)."""
        return [
            self.p4c, "--target", "bmv2", "--arch", "v1model",
            "-I", str(output_dir / "include"), "-I", str(P4_INCLUDE),
            *self.defines(), "-o", str(output_dir), str(P4_MAIN),
        ]  # fmt: skip


def build_hash(options: ATPCompileOptions) -> str:
    """Hash of p4/atp/'s files (path and content) and the options; names the output directory."""
    files = [(path.relative_to(P4_DIR).as_posix(), path) for path in source_files(P4_DIR)]
    return source_hash(files, repr((options.defines(), options.p4c)))


def _run(what: str, command: list[str]) -> subprocess.CompletedProcess:
    log.info("%s: %s", what, " ".join(command))
    return subprocess.run(command, capture_output=True, text=True, cwd=shared_params.REPO_ROOT, check=False)


def compile_atp(options: ATPCompileOptions, build_root: Path = BUILD_ROOT) -> Path:
    """Path of atp.json for ``options``, compiling only if this build is not cached."""
    output_dir = build_root / build_hash(options)
    json_name = f"{P4_MAIN.stem}.json"
    if not (output_dir / json_name).exists() and shutil.which(options.p4c) is None:
        raise P4CompileError(f"p4c not found ({options.p4c!r} is not on PATH); see docs/targets.md")

    def run_p4c(staging: Path) -> None:
        log.info("building ATP's P4 program for k = %d, pool %d (first use; cached in %s)",
                 options.k, options.pool_size, output_dir)
        generated = _run("generate", options.generate_command(staging))
        if generated.returncode != 0:
            raise P4CompileError(f"p4/atp/gen_elements.py failed (exit {generated.returncode}): {generated.stderr.strip()}")
        command = options.command(staging)
        result = _run("p4c", command)
        if result.returncode != 0 or not (staging / json_name).exists():
            output = f"{result.stdout}{result.stderr}"
            raise P4CompileError(f"p4c: {first_error(output)} (exit {result.returncode})\n{' '.join(command)}\n{output}")
        if result.stderr:
            log.warning("p4c: %s", result.stderr.strip())

    try:
        return build_once(output_dir, json_name, run_p4c)
    except FileNotFoundError as error:
        raise P4CompileError(str(error)) from error
