"""A class's grades as CSV: one row per submission, written as it is graded.

Beside the grader's own CSV (student, score, maximum, seconds, points per test, what kept
a submission from running), ``grade-batch --lms`` writes the file an LMS gradebook
imports: Canvas's (its gradebook export's identity columns, the student's id in
``SIS Login ID``, one column for the lab) or Moodle's ("Import grades from CSV": a
``Username`` column to map to the user's username, one column for the lab's grade item).
Each row is flushed when written: a batch stopped midway keeps the grades it made. A
field a spreadsheet would take for a formula (``=``, ``+``, ``-``, ``@`` first) is
prefixed with a quote.
"""

from __future__ import annotations

import contextlib
import csv
from pathlib import Path
from types import TracebackType
from typing import IO

from labs.catalog import Lab, Track
from labs.grade import Grade

LMS = {
    "canvas": lambda lab: ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", f"Lab {lab.number}"],
    "moodle": lambda lab: ["Username", f"Lab {lab.number}"],
}
"""Each LMS's header for ``lab``."""


def cell(text: str) -> str:
    """``text`` as a spreadsheet shows it, never as a formula."""
    return f"'{text}" if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


class Writers(contextlib.AbstractContextManager):
    """The batch's CSV at ``path`` and one per ``lms`` beside it (``path``'s stem, ``-canvas.csv``)."""

    def __init__(self, path: Path, lab: Lab, track: Track, lms: list[str]) -> None:
        self.lab = lab
        self.track = track
        self.paths = [path, *(path.with_name(f"{path.stem}-{name}.csv") for name in dict.fromkeys(lms))]
        self.kinds = ["grader", *dict.fromkeys(lms)]
        self._handles: list[IO[str]] = []
        self._writers: list[csv.writer] = []

    def __enter__(self) -> Writers:
        for path, kind in zip(self.paths, self.kinds):
            handle = path.open("w", newline="")
            self._handles.append(handle)
            writer = csv.writer(handle)
            header = ["student", "score", "max", "seconds", *(test.id for test in self.track.tests), "problem"] if kind == "grader" \
                else LMS[kind](self.lab)  # fmt: skip
            writer.writerow(header)
            self._writers.append(writer)
            handle.flush()
        return self

    def write(self, student: str, grade: Grade) -> None:
        for handle, writer, kind in zip(self._handles, self._writers, self.kinds):
            if kind == "grader":
                row = [cell(student), grade.score, grade.max_score, grade.seconds, *(test.earned for test in grade.tests),
                       cell(grade.problem or "")]  # fmt: skip
            elif kind == "canvas":
                row = ["", "", "", cell(student), "", grade.score]
            else:
                row = [cell(student), grade.score]
            writer.writerow(row)
            handle.flush()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        for handle in self._handles:
            handle.close()
