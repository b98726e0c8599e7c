"""The labs: one folder per lab, ``labs/NN-name/``, with its README.md and lab.yaml.

lab.yaml is checked against ``labs/lab.schema.yaml`` by the project's YAML validator, so a
mistake names the file and the key. A lab has one or two tracks (``python``: the embedded
switch, anywhere; ``p4``: bmv2, in the Vagrant VM); each track lists the files the student
writes in and the graded tests, with their points and what the skeleton must do in each.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from base.yamlschema import ConfigError, load_schema, load_yaml, validate

LABS_DIR = Path(__file__).resolve().parent
SCHEMA = LABS_DIR / "lab.schema.yaml"
DEFAULT_TIMEOUT_S = 60.0


VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
"""Gradescope's: shown to the student at once, never, after the due date, once published."""


@dataclass(frozen=True, eq=False)
class Call:
    """One call an instructor's grade makes with the submission's code (labs/harness.py):
    a function of the tree by its dotted name, with JSON arguments (equal only to itself:
    its arguments are lists and mappings)."""

    function: str
    args: tuple = ()
    kwargs: tuple[tuple[str, object], ...] = ()

    @classmethod
    def from_yaml(cls, data: list | dict) -> Call:
        """``[function, arg, ...]`` or ``{function: ..., args: [...], kwargs: {...}}``."""
        if isinstance(data, list):
            return cls(data[0], tuple(data[1:]))
        return cls(data["function"], tuple(data.get("args", [])), tuple(data.get("kwargs", {}).items()))


@dataclass(frozen=True)
class GradedTest:
    id: str
    """pytest node id, relative to the tree's root."""
    points: int
    skeleton: str
    """'fail' or 'pass': what the untouched skeleton does in this test."""
    calls: tuple[Call, ...] = ()
    """What an instructor's grade computes with the submission's code for this test; it
    passes when every output equals the reference's (labs/record.py). None: the test's own
    verdict, from pytest in the sandbox, is graded (a track whose files are not Python)."""
    visibility: str = "visible"
    """One of VISIBILITIES: when the student may see this test's name, result and message."""
    rel: float = 1e-9
    """Relative tolerance of a float output against the reference's."""
    uses: tuple[str, ...] | None = None
    """The track's files this test runs (None: all). In an instructor's grade of a test
    without calls, the others are the handout's: where none of the submission's Python
    files is left, pytest's verdict is made where no code of the submission runs."""

    @property
    def file(self) -> str:
        return self.id.split("::")[0]


@dataclass(frozen=True)
class Track:
    name: str
    files: tuple[str, ...]
    tests: tuple[GradedTest, ...]
    needs: tuple[str, ...]

    @property
    def points(self) -> int:
        return sum(test.points for test in self.tests)


@dataclass(frozen=True)
class Lab:
    number: int
    folder: Path
    title: str
    hours: str
    timeout_s: float
    cap_s: float | None
    """Wall-clock cap on one submission's sandboxed grade (None: its tests' timeouts and slack)."""
    run: str | None
    figures: tuple[str, ...]
    plot_about: str
    tracks: dict[str, Track]

    @property
    def name(self) -> str:
        return self.folder.name

    def keeps_by_default(self, lab: int) -> bool:
        """Whether this lab's handout keeps lab ``lab``'s answers unless told otherwise: only
        an earlier lab's. No lab's tests or run execute a later lab's region (labs 0-2 run with
        a fixed timeout, not lab 3's timers; lab 0's run sums int32s, not lab 1's quantized
        floats), so no handout gives a later lab's answer away (labs/README.md, "Handing out")."""
        return lab < self.number

    def track(self, name: str | None) -> Track:
        """The track called ``name`` (None: python, or the only one)."""
        if name is None:
            name = "python" if "python" in self.tracks else next(iter(self.tracks))
        if name not in self.tracks:
            raise ConfigError(f"lab {self.number} has no {name!r} track; it has: {', '.join(self.tracks)}")
        return self.tracks[name]


def load_lab(folder: Path) -> Lab:
    """The lab described by ``folder/lab.yaml``."""
    path = folder / "lab.yaml"
    data = load_yaml(path)
    validate(data, load_schema(SCHEMA), str(path))
    tracks = {
        name: Track(
            name,
            tuple(track["files"]),
            tuple(GradedTest(t["id"], t["points"], t["skeleton"], tuple(map(Call.from_yaml, t.get("calls", []))),
                             t.get("visibility", "visible"), float(t.get("rel", 1e-9)),
                             tuple(t["uses"]) if "uses" in t else None) for t in track["tests"]),  # fmt: skip
            tuple(track.get("needs", [])),
        )
        for name, track in data["tracks"].items()
    }
    strays = [(test.id, name) for track in tracks.values() for test in track.tests for name in test.uses or () if name not in track.files]
    if strays:
        raise ConfigError(f"{path}: {strays[0][0]} uses {strays[0][1]}, which is not one of its track's files")
    unseen = [test.id for track in tracks.values() for test in track.tests if test.visibility != "visible" and not test.calls]
    if unseen:
        raise ConfigError(f"{path}: {unseen[0]} is not visible but has no calls: its file would have to enter the sandbox")
    return Lab(data["number"], folder, data["title"], data["hours"], float(data.get("timeout_s", DEFAULT_TIMEOUT_S)),
               data.get("cap_s"), data.get("run"), tuple(data["plot"]["figures"]), data["plot"]["about"], tracks)  # fmt: skip


def all_labs(labs_dir: Path = LABS_DIR) -> list[Lab]:
    """Every lab, by number; two folders claiming one number are an error."""
    labs = sorted((load_lab(folder) for folder in labs_dir.iterdir() if (folder / "lab.yaml").is_file()), key=lambda lab: lab.number)
    numbers = [lab.number for lab in labs]
    duplicated = sorted({n for n in numbers if numbers.count(n) > 1})
    if duplicated:
        raise ConfigError(f"{labs_dir}: more than one lab numbered {', '.join(map(str, duplicated))}")
    return labs


def by_number(number: int, labs_dir: Path = LABS_DIR) -> Lab:
    for lab in all_labs(labs_dir):
        if lab.number == number:
            return lab
    raise ConfigError(f"no lab {number}; there are: {', '.join(str(lab.number) for lab in all_labs(labs_dir))}")
