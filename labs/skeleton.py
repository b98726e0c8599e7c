"""A student's tree for one lab: a copy of the repository with that lab's regions stubbed.

The copy holds what git tracks (plus new, not ignored files, so an instructor's uncommitted
lab works too), never ``.venv``, results or build output. Inside each region of the lab the
reference code is replaced by a stub that fails at once and says what to write; the marker
lines stay, so the student sees where the answer goes:

- Python: ``raise NotImplementedError("Lab n: <hint>")`` at the marker's indentation. A
  switch or worker that reaches it dies at once with that message (in its log), so a test
  fails within seconds instead of waiting out a job's deadline.
- P4: ``mark_to_drop(standard_metadata);`` under a comment with the hint: the program still
  compiles, and the switch drops what the student has not handled yet.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from labs.markers import Region, marked_files

log = logging.getLogger(__name__)


class SkeletonError(RuntimeError):
    """The skeleton cannot be made (not a git checkout, output not empty, no region found)."""


def tracked_files(root: Path) -> list[str]:
    """Files git tracks in ``root`` plus untracked ones it does not ignore, relative paths."""
    try:
        listing = subprocess.run(
            ["git", "-C", str(root), "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
    except FileNotFoundError:
        raise SkeletonError("git is not installed: the skeleton is a copy of what git tracks") from None
    except subprocess.CalledProcessError as error:
        raise SkeletonError(f"{root} is not a git checkout: {error.stderr.strip()}") from None
    return sorted({path for path in listing.stdout.split("\0") if path and (root / path).is_file()})


def stub_lines(region: Region, suffix: str) -> list[str]:
    """What replaces the region's lines in a ``suffix`` (".py" or ".p4") file."""
    message = f"Lab {region.lab}: {region.hint}"
    if suffix == ".py":
        return [f"{region.indent}raise NotImplementedError({message!r})"]
    if suffix == ".p4":
        return [f"{region.indent}// {message}", f"{region.indent}mark_to_drop(standard_metadata);"]
    raise SkeletonError(f"{region.path}: no stub for {suffix} files")


def stub_text(text: str, regions: list[Region], suffix: str) -> str:
    """``text`` with every region in ``regions`` replaced by its stub, marker lines kept."""
    lines = text.splitlines()
    for region in sorted(regions, key=lambda r: r.begin, reverse=True):
        lines[region.begin + 1 : region.end] = stub_lines(region, suffix)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def copy_tree(source: Path, out: Path) -> list[str]:
    """Copy ``source``'s tracked files into ``out`` (new or empty); returns them."""
    if out.exists() and any(out.iterdir()):
        raise SkeletonError(f"{out} is not empty: give a new folder for the skeleton")
    files = tracked_files(source)
    for path in files:
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / path, target)
    return files


def make_skeleton(source: Path, out: Path, lab: int, files: list[str]) -> list[Region]:
    """Write lab ``lab``'s skeleton of ``source`` into ``out``, stubbing its regions in ``files``.

    Returns the regions stubbed. Regions of other labs stay as they are (the reference), so
    a student works on one lab at a time.
    """
    copied = copy_tree(source, out)
    missing = sorted(set(files) - set(copied))
    if missing:
        raise SkeletonError(f"lab {lab}'s files are not in {source}: {', '.join(missing)}")
    stubbed: list[Region] = []
    for path, regions in marked_files(out, files).items():
        mine = [region for region in regions if region.lab == lab]
        if not mine:
            continue
        target = out / path
        target.write_text(stub_text(target.read_text(), mine, target.suffix))
        stubbed += mine
        log.debug("%s: stubbed %s", path, ", ".join(region.where for region in mine))
    if not stubbed:
        raise SkeletonError(f"no BEGIN LAB {lab} region in {', '.join(files)}")
    _commit(out, f"lab {lab} skeleton")
    return stubbed


def _commit(out: Path, message: str) -> None:
    """Make the skeleton a git repository of its own, one commit: ``git diff`` then shows the
    student's work, and the tree can be handed in as a clone."""
    git = ["git", "-C", str(out), "-c", "user.name=labs", "-c", "user.email=labs@localhost"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", message]):
        subprocess.run([*git, *command], check=True, capture_output=True)
