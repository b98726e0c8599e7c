"""Build outputs cached by a hash of their sources and options (p4c for bmv2, clang for eBPF,
the C compiler for the native worker data path).

Every switch of every run needs the same compiled program; more importantly a stale build
(sources edited after it) would run a program the Python side no longer matches. An
output directory is therefore named by a hash of every source file (path and content) plus
the compiler options: an edit or a different option gets a fresh build, an unchanged tree
reuses the existing one. A build goes into a temporary directory beside the final one and
is renamed into place, so a concurrent run or an interrupted build never leaves a
half-written cache entry.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable, Iterable


def source_hash(files: Iterable[tuple[str, Path]], options: str) -> str:
    """Hash of (name, content) of every file and of ``options``: names a build directory."""
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    digest.update(options.encode())
    return digest.hexdigest()[:16]


def build_once(output_dir: Path, artifact: str, build: Callable[[Path], None]) -> Path:
    """``output_dir / artifact``, running ``build(staging_dir)`` only if it does not exist yet.

    ``build`` writes ``artifact`` into the staging directory it is given or raises; a
    failure leaves nothing behind.
    """
    path = output_dir / artifact
    if path.exists():
        return path
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}-", dir=output_dir.parent))
    try:
        staging.chmod(0o755)  # mkdtemp's 0700 would hide the build from every other user of the checkout
        build(staging)
        if not (staging / artifact).exists():
            raise FileNotFoundError(f"the build wrote no {artifact} into {staging}")
        try:
            os.rename(staging, output_dir)
        except OSError:
            pass  # another process finished the same build first; its output is identical
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    if not path.exists():
        raise FileNotFoundError(f"{output_dir} exists but holds no {artifact}: remove that directory and retry")
    return path
