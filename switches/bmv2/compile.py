"""Compile a protocol's P4 program for bmv2 (v1model) with p4c, once per distinct source and options.

Every switch node of every run needs the same JSON; compiling takes a second or more per
call (about 10 s at k = 256). The build is cached under a hash of every file of the
program's source folder plus the compiler options (``base/build_cache.py``): an edit,
another k or another pool size gets a fresh build, an unchanged tree reuses the existing one.

What is built is the program's record (``P4Program``: its main file, include folder, per-k
generator and defines), which the target declares for each protocol it runs
(switches/bmv2/__init__.py, ``PROGRAMS``). A build is two steps, both logged as the commands
a student would type: the generator writes the per-element code for the build's k into the
build's own ``include/``, and p4c compiles with that directory first on its include path
and the program's defines.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from protocol import params
from base.build_cache import build_once, source_hash

log = logging.getLogger(__name__)

BUILD_ROOT = params.BUILD_DIR / "p4"


class P4CompileError(RuntimeError):
    """p4c rejected the program; the message carries the compiler's output verbatim."""


@dataclass(frozen=True, kw_only=True)
class P4Program:
    """One protocol's P4 program as p4c builds it for bmv2."""

    main: Path
    """The file p4c compiles; its stem names the JSON."""
    include: Path
    """Its include folder, searched after the build's own generated one."""
    sources: Path
    """The folder of its parts, whose every file the build's hash covers (``main`` too)."""
    generator: Path
    """``python generator --k K --out DIR`` writes the per-k code into a build's include folder."""
    defines: Callable[[int, int], list[str]]
    """(k, max_pool_size) -> p4c's ``-D`` options."""
    check: Callable[[int, int], None]
    """(k, max_pool_size) -> None, or a ValueError naming what the program cannot be built for."""
    controller: str | None = None
    """"module:attribute" of the controller that answers its digests while simple_switch runs
    (``cls(name, notifications_addr, thrift_port, json_path)``, started and stopped with it:
    switches/bmv2/process.py); None: it sends none."""
    process: str = "switches.bmv2.process:Bmv2Process"
    """"module:attribute" of the simple_switch process class that runs it (its ``for_ports``, as
    the target's ``data_plane`` calls it): ``Bmv2Process``, or a subclass that sets up more
    once the switch runs (ATP's paces each port at its link's rate)."""


@dataclass(frozen=True, kw_only=True)
class CompileOptions:
    """Everything besides the sources that changes the compiled program."""

    program: P4Program
    k: int
    max_pool_size: int
    p4c: str = "p4c"

    def __post_init__(self) -> None:
        self.program.check(self.k, self.max_pool_size)

    def defines(self) -> list[str]:
        return self.program.defines(self.k, self.max_pool_size)

    def generate_command(self, output_dir: Path) -> list[str]:
        """The command that writes the per-element code for this k into ``output_dir/include``."""
        return [sys.executable, str(self.program.generator), "--k", str(self.k), "--out", str(output_dir / "include")]

    def command(self, output_dir: Path) -> list[str]:
        """The p4c command line (also what a student would type by hand)."""
        return [
            self.p4c,
            "--target", "bmv2",
            "--arch", "v1model",
            "-I", str(output_dir / "include"),
            "-I", str(self.program.include),
            *self.defines(),
            "-o", str(output_dir),
            str(self.program.main),
        ]  # fmt: skip


def source_files(sources: Path) -> list[Path]:
    """Every regular file under ``sources``, in a stable order (sources, generator, README alike:
    hashing a little too much only costs a rebuild, hashing too little runs stale code)."""
    return sorted(p for p in sources.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def build_hash(options: CompileOptions, sources: Path | None = None) -> str:
    """Hash of the program's main file and sources (path and content; ``sources`` replaces its
    folder) and the options; names the output directory."""
    sources = options.program.sources if sources is None else sources
    main = options.program.main
    files = [(main.name, main)] + [(path.relative_to(sources).as_posix(), path) for path in source_files(sources)]
    return source_hash(files, repr((options.defines(), options.p4c)))


def first_error(output: str) -> str:
    """p4c's first error line (``file(line): ... error: ...``, paths relative to the tree), else
    its last line: it leads the exception's message, because a test report shows one line."""
    lines = [line.strip().replace(f"{params.REPO_ROOT}/", "") for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return (errors or lines or ["no output"])[0]


def compile_p4(options: CompileOptions, build_root: Path = BUILD_ROOT) -> Path:
    """Path of the program's JSON for ``options``, compiling only if this build is not cached."""
    output_dir = build_root / build_hash(options)
    json_name = f"{options.program.main.stem}.json"
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
            generator = options.program.generator.relative_to(params.REPO_ROOT)
            raise P4CompileError(f"{generator} failed (exit {generated.returncode}): {generated.stderr.strip()}")
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
