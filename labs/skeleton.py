"""A student's tree for one lab: a copy of the repository with that lab's regions stubbed.

The copy holds what git tracks (plus new, not ignored files, so an instructor's uncommitted
lab works too; the clean tree a submission is graded in holds only what the fork's last
commit holds), never ``.venv``, results, build output, the instructor-only solutions
(INSTRUCTOR_ONLY) or the file of a test the student must not see (lab.yaml's visibility). Inside each region of the lab, in every track's files, the reference code
is replaced by a stub that fails at once and says what to write, and so is every other lab's
region the handout does not keep (by default it keeps earlier labs' answers only, so no
handout holds a later lab's; labs/README.md, "Handing out"). The marker lines stay, so the
student sees where the answer goes:

- Python: ``raise NotImplementedError("Lab n: <hint>")`` at the marker's indentation. A
  switch or worker that reaches it dies at once with that message (in its log), so a test
  fails within seconds instead of waiting out a job's deadline.
- P4: ``mark_to_drop(standard_metadata);`` under a comment with the hint: the program still
  compiles, and the switch drops what the student has not handled yet.
"""

from __future__ import annotations

import io
import logging
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from labs.catalog import Lab, Track
from labs.markers import Region, marked_files, scan_file

log = logging.getLogger(__name__)

INSTRUCTOR_ONLY = ("tests/test_lab_solutions.py", "labs/instructor/")
"""What no handout gets (a path ending in / is a folder): the grader-strength test keeps a
correct solution of every lab, labs/instructor/ the answer key, rubrics and expected figures."""


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
        raise SkeletonError(f"{root} is not a git checkout ({error.stderr.strip()}); an installed testbed is not one: clone "
                            "the repository and run python -m labs in the clone (docs/install.md)") from None
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
    return fill_regions(text, {region: stub_lines(region, suffix) for region in regions})


def fill_regions(text: str, bodies: dict[Region, list[str]]) -> str:
    """``text`` with each region's lines (between its markers, which stay) replaced by its
    body: a stub, or a solution written into a skeleton (tests/test_lab_solutions.py)."""
    lines = text.splitlines()
    for region in sorted(bodies, key=lambda r: r.begin, reverse=True):
        lines[region.begin + 1 : region.end] = bodies[region]
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def copy_tree(source: Path, out: Path, leave_out: tuple[str, ...] = (), committed: bool = False) -> list[str]:
    """Copy ``source``'s tracked files but ``leave_out`` into ``out`` (new or empty); returns
    them. With ``committed``, its last commit's files as committed (``git archive``): no
    file the instructor has not committed, nor an uncommitted change."""
    if out.exists() and any(out.iterdir()):
        raise SkeletonError(f"{out} is not empty: give a new folder for the skeleton")
    if committed:
        return _extract_commit(source, out, leave_out)
    files = [path for path in tracked_files(source) if not left_out(path, leave_out)]
    for path in files:
        target = out / path
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / path, target)
    return files


def _extract_commit(source: Path, out: Path, leave_out: tuple[str, ...]) -> list[str]:
    """``source``'s HEAD but ``leave_out`` into ``out``; its regular files."""
    try:
        archive = subprocess.run(["git", "-C", str(source), "archive", "--format=tar", "HEAD"], capture_output=True, check=True).stdout
    except FileNotFoundError:
        raise SkeletonError("git is not installed: the clean tree is a copy of what git tracks") from None
    except subprocess.CalledProcessError as error:
        raise SkeletonError(f"{source} is not a git checkout with a commit: {error.stderr.decode(errors='replace').strip()}") from None
    out.mkdir(parents=True, exist_ok=True)
    files = []
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        for member in tar:
            if left_out(member.name, leave_out) or Path(member.name).is_absolute() or ".." in Path(member.name).parts:
                continue
            target = out / member.name
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
            elif member.issym():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(member.linkname)
            elif member.isfile():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
                target.chmod(member.mode & 0o755)
                files.append(member.name)
    return sorted(files)


def left_out(path: str, leave_out: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``leave_out`` or in one of its folders (those ending in /)."""
    return any(path == out or (out.endswith("/") and path.startswith(out)) for out in leave_out)


@dataclass(frozen=True)
class Handout:
    """What a skeleton stubbed: where the student writes, and every region stubbed."""

    student: list[Region]
    """The lab's regions in the track's files, at their lines in the skeleton: where the answer goes."""
    stubbed: list[Region]
    """Every region stubbed: those, the lab's regions of its other track, other labs' not kept."""
    kept: list[Region]
    """Other labs' regions whose answer the handout holds."""


def unseen_test_files(lab: Lab) -> tuple[str, ...]:
    """The files of ``lab``'s tests the student must not see (not ``visible``), in any track;
    a visible test in one of them is an error (its file would be left out with them)."""
    tests = [test for track in lab.tracks.values() for test in track.tests]
    unseen = {test.file for test in tests if test.visibility != "visible"}
    shared = sorted(test.id for test in tests if test.visibility == "visible" and test.file in unseen)
    if shared:
        raise SkeletonError(f"lab {lab.number}: the visible test {shared[0]} shares its file with a test the student must not see")
    return tuple(sorted(unseen))


def without_unseen_tests(text: str) -> str:
    """A lab.yaml's ``text`` without the entries of its tests the student must not see:
    their name, points and calls (inputs) stay in the fork. The lines of each such entry
    go, found from where YAML's parser says the entry starts and ends; the rest (comments
    included) stays as written."""
    root = yaml.compose(text)
    lines = text.splitlines(keepends=True)
    cut: set[int] = set()
    for _, track in _items(_value(root, "tracks")):
        for entry in getattr(_value(track, "tests"), "value", []):
            visibility = _value(entry, "visibility")
            if visibility is not None and visibility.value != "visible":
                end = entry.end_mark  # a block mapping ends where the next entry (or what follows) begins
                ends_on_its_line = end.line < len(lines) and lines[end.line][: end.column].strip()
                cut.update(range(entry.start_mark.line, end.line + (1 if ends_on_its_line else 0)))
    return "".join(line for number, line in enumerate(lines) if number not in cut)


def _items(node: yaml.Node | None) -> list[tuple[yaml.Node, yaml.Node]]:
    return node.value if isinstance(node, yaml.MappingNode) else []


def _value(node: yaml.Node | None, key: str) -> yaml.Node | None:
    return next((value for name, value in _items(node) if name.value == key), None)


def make_skeleton(source: Path, out: Path, lab: Lab, track: Track, keep: frozenset[int] | None = None,
                  committed: bool = False) -> Handout:  # fmt: skip
    """Write ``lab``'s skeleton of ``source`` for ``track`` into ``out`` (with ``committed``,
    of ``source``'s last commit only: the clean tree of an instructor's grade).

    Stubs the lab's regions in every file (a python handout must not hold the P4 answer)
    and every other lab's region it does not keep: with ``keep``, those of the labs in it;
    without, the earlier labs' (``lab.keeps_by_default``).
    """
    if keep is not None and lab.number in keep:
        raise SkeletonError(f"lab {lab.number}'s skeleton cannot keep lab {lab.number}'s answer: it is what the student writes")
    copied = copy_tree(source, out, INSTRUCTOR_ONLY + unseen_test_files(lab), committed)
    for path in copied:
        if path.startswith("labs/") and path.endswith("/lab.yaml"):
            (out / path).write_text(without_unseen_tests((out / path).read_text()))
    missing = sorted(set(track.files) - set(copied))
    if missing:
        raise SkeletonError(f"lab {lab.number}'s files are not in {source}: {', '.join(missing)}")

    def kept(region: Region) -> bool:
        if region.lab == lab.number:
            return False
        return region.lab in keep if keep is not None else lab.keeps_by_default(region.lab)

    stubbed: list[Region] = []
    held: list[Region] = []
    for path, regions in marked_files(out, copied).items():
        cut = [region for region in regions if not kept(region)]
        held += [region for region in regions if kept(region)]
        if not cut:
            continue
        target = out / path
        target.write_text(stub_text(target.read_text(), cut, target.suffix))
        stubbed += cut
        log.debug("%s: stubbed %s", path, ", ".join(f"lab {region.lab} {region.where}" for region in cut))
    # where the student writes, as the skeleton's lines number them (its stubs are shorter than the answers)
    student = [region for path in track.files for region in scan_file(out, path) if region.lab == lab.number]
    if not student:
        raise SkeletonError(f"no BEGIN LAB {lab.number} region in {', '.join(track.files)}")
    _commit(out, f"lab {lab.number} skeleton")
    earlier = sorted({(region.lab, region.path) for region in stubbed if lab.keeps_by_default(region.lab)})
    if earlier:  # --keep left out an answer the default keeps
        log.warning("lab %d's handout stubs the earlier %s: what of lab %d builds on them fails until the student writes them too",
                    lab.number, ", ".join(f"lab {n}'s {path}" for n, path in earlier), lab.number)  # fmt: skip
    return Handout(student, stubbed, held)


def _commit(out: Path, message: str) -> None:
    """Make the skeleton a git repository of its own, one commit: ``git diff`` then shows the
    student's work, and the tree can be handed in as a clone."""
    git = ["git", "-C", str(out), "-c", "user.name=labs", "-c", "user.email=labs@localhost"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", message]):
        subprocess.run([*git, *command], check=True, capture_output=True)
