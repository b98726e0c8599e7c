"""Telling a disk that refused a write apart from a run that failed.

A full disk or a read-only results folder is the machine's problem, not the experiment's:
run_experiment.py gives it its own exit status and one line, whichever write hit it first
-- the runner's tables (an OSError with errno ENOSPC or EROFS), numpy's tensors (numpy
reports a short write without an errno) or a worker's result file (reported by the
worker as an error message). The first kind is recognised by its errno; for the others
the file system of the results folder is asked whether it is full or read-only.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
PERMISSION_ERRNOS = {errno.EACCES, errno.EPERM}
"""Only storage errors when they name a file (sockets and namespaces raise them too)."""
FULL_BELOW_BYTES = 1 << 20


def storage_problem(exc: BaseException, results: Path) -> str | None:
    """Why the disk refused a write, if that is what ``exc`` (or its causes) is; else None."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, OSError) and (
            cause.errno in STORAGE_ERRNOS or (cause.errno in PERMISSION_ERRNOS and cause.filename is not None)
        ):
            return str(cause)
        cause = cause.__cause__ or cause.__context__
    state = filesystem_state(existing_ancestor(results))
    if state is None:
        return None
    first_line = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return f"its file system is {state} ({first_line})"


def existing_ancestor(path: Path) -> Path:
    while not path.exists():
        path = path.parent
    return path


def filesystem_state(path: Path) -> str | None:
    """'read-only' or 'full' (under FULL_BELOW_BYTES available), or None. A file system
    without blocks (/proc, /sys) is neither: it holds no files to fill."""
    stat = os.statvfs(path)
    if stat.f_flag & os.ST_RDONLY:
        return "read-only"
    if stat.f_blocks and stat.f_bavail * stat.f_frsize < FULL_BELOW_BYTES:
        return "full"
    return None
