"""Find the regions a lab's student writes: ``BEGIN LAB n`` / ``END LAB n`` comment lines.

The reference solution is the project's own code; a lab marks its answer in place::

    # BEGIN LAB <n>: <what the student writes, one line>
    ...the reference code...
    # END LAB <n>

(``//`` instead of ``#`` in P4). The text after the colon says what to write: the skeleton
maker puts it into the stub's error message. Regions do not nest and every BEGIN has its
END with the same number, or the file is reported with the line at fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(r"^(?P<indent>[ \t]*)(?P<comment>#|//)\s*(?P<kind>BEGIN|END) LAB (?P<lab>\d+)\b\s*:?\s*(?P<hint>.*?)\s*$")
"""A marker line: indentation, comment leader, BEGIN or END, the lab number, the hint."""


class MarkerError(ValueError):
    """Markers that do not pair up; the message names the file and line."""


@dataclass(frozen=True)
class Region:
    """Lines ``begin`` < i < ``end`` (0-based; the marker lines themselves are ``begin`` and ``end``)."""

    path: str
    lab: int
    begin: int
    end: int
    indent: str
    comment: str
    hint: str

    @property
    def where(self) -> str:
        return f"{self.path}:{self.begin + 1}-{self.end + 1}"


def scan_text(text: str, path: str) -> list[Region]:
    """Every region in ``text`` (``path`` only names the file in errors and in the regions)."""
    regions: list[Region] = []
    open_match: re.Match[str] | None = None
    open_line = 0
    for number, line in enumerate(text.splitlines()):
        match = MARKER.match(line)
        if match is None:
            continue
        lab = int(match["lab"])
        if match["kind"] == "BEGIN":
            if open_match is not None:
                raise MarkerError(f"{path}:{number + 1}: BEGIN LAB {lab} inside BEGIN LAB {open_match['lab']} of line {open_line + 1}")
            if not match["hint"]:
                raise MarkerError(f"{path}:{number + 1}: BEGIN LAB {lab} needs a hint after a colon: what the student writes")
            open_match, open_line = match, number
            continue
        if open_match is None or int(open_match["lab"]) != lab:
            raise MarkerError(f"{path}:{number + 1}: END LAB {lab} without a BEGIN LAB {lab} before it")
        if number == open_line + 1:
            raise MarkerError(f"{path}:{number + 1}: LAB {lab} region is empty")
        regions.append(Region(path, lab, open_line, number, open_match["indent"], open_match["comment"], open_match["hint"]))
        open_match = None
    if open_match is not None:
        raise MarkerError(f"{path}:{open_line + 1}: BEGIN LAB {open_match['lab']} is never ended")
    return regions


def scan_file(root: Path, path: str) -> list[Region]:
    """The regions of ``root/path``."""
    return scan_text((root / path).read_text(), path)


SOURCE_SUFFIXES = (".py", ".p4")
"""Where regions can be: the files a stub can be written into (documentation is not scanned)."""


def marked_files(root: Path, files: list[str]) -> dict[str, list[Region]]:
    """Regions per source file, for the files (relative to ``root``) that have any."""
    found = {}
    for path in files:
        if not path.endswith(SOURCE_SUFFIXES):
            continue
        text = _text_or_none(root / path)
        if text is not None and ("BEGIN LAB" in text or "END LAB" in text):
            regions = scan_text(text, path)
            if regions:
                found[path] = regions
    return found


def _text_or_none(path: Path) -> str | None:
    """A file's text, or None for binaries, missing files (a deleted tracked file) and links to folders."""
    try:
        return path.read_text()
    except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
        return None
