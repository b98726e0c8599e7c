"""A temporary folder removed whatever a submission left in it.

A submission writes into its report folder, which lies in the grader's temporary folder:
a tree thousands of folders deep there is beyond ``shutil.rmtree``'s recursion, so
``tempfile.TemporaryDirectory`` would fail to remove it and leave all of it (and any large
file beside it) behind. coreutils' ``rm -rf`` walks any depth.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """A new temporary folder, removed with everything in it on the way out."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        remove(folder)


def remove(folder: Path) -> None:
    """Remove ``folder`` and what is in it, however deep, without following links."""
    try:
        shutil.rmtree(folder)
    except FileNotFoundError:
        pass
    except (OSError, RecursionError):
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(folder)], check=False, stdin=subprocess.DEVNULL)
