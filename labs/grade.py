"""Grade a tree for one lab: run its graded tests, score them, print and save the result.

The tests run in a pytest subprocess with the tree as working directory and first on
PYTHONPATH, so the tree's code is what is imported (and what the switch and worker
processes the tests start import: they run from the tree too), never the checkout the
grader itself was installed from. A student grades their own tree in place; an
instructor grades a submission as hostile: only its graded files, copied onto a clean
tree (``clean_tree``, ``place_submission``), run in the sandbox (labs/sandbox.py), under
a cap on its time and on the memory of all its processes together. pytest-timeout bounds
every test; pytest's JUnit XML report says what happened to each one. A test scores its points only if it passed: a
failure, an error, a skip (say, bmv2 absent on the P4 track) or a test that did not run
scores nothing, and the table says why in one line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import asdict, dataclass
from pathlib import Path

from labs import sandbox
from labs.catalog import Lab, Track
from labs.skeleton import make_skeleton
from switches.target import Toolchain
from switches.targets import REGISTRY

PASSED = "pass"
SLACK_S = 120.0
"""Beyond the sum of the per-test timeouts: pytest start-up, collection, fixtures' teardown."""
JUNIT = "junit.xml"


@dataclass(frozen=True)
class TestResult:
    id: str
    points: int
    earned: int
    outcome: str
    """pass, fail, error, skipped or 'not run'."""
    message: str
    """First line of the failure, error or skip reason; empty on a pass."""
    seconds: float


@dataclass(frozen=True)
class Grade:
    lab: int
    track: str
    tree: str
    score: int
    max_score: int
    seconds: float
    tests: list[TestResult]
    pytest_exit: int
    problem: str | None = None
    """What kept the student's code from running at all (a syntax error in one of the track's
    files: its file, line and message), the report's first line; pytest would only say that
    it found no tests to run."""

    @property
    def full_marks(self) -> bool:
        return self.score == self.max_score


def junit_key(node_id: str) -> tuple[str, str]:
    """(classname, name) pytest's JUnit XML gives the test ``node_id``."""
    parts = node_id.split("::")
    path = parts[0].removesuffix(".py").replace("/", ".")
    return ".".join([path, *parts[1:-1]]), parts[-1]


FIXTURE_FAILURE = re.compile(r'^failed on (?P<phase>setup|teardown) with "(?P<what>.*?)"?$')
QUALIFIED_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)+(?P<name>[A-Za-z_]\w*(?:Error|Exception|Exit)\b)")


def readable(line: str) -> str:
    """A failure's first line, shorter where pytest pads it: 'failed on setup with
    "switches.bmv2.compile.P4CompileError: p4c: ..."' becomes 'setup: P4CompileError: p4c:
    ...', so what went wrong fits the score table's column."""
    fixture = FIXTURE_FAILURE.match(line)
    if fixture:
        line = f"{fixture['phase']}: {QUALIFIED_EXCEPTION.sub(lambda m: m['name'], fixture['what'])}"
    return QUALIFIED_EXCEPTION.sub(lambda m: m["name"], line)


def read_junit(report: bytes) -> dict[tuple[str, str], tuple[str, str, float]]:
    """Per (classname, name) of pytest's JUnit XML ``report``: outcome, first message line, seconds."""
    outcomes = {}
    try:
        cases = list(ElementTree.fromstring(report).iter("testcase"))
    except ElementTree.ParseError:  # cut short: the cap killed pytest as it wrote
        return {}
    for case in cases:
        outcome, message = PASSED, ""
        for tag in ("failure", "error", "skipped"):
            element = case.find(tag)
            if element is not None:
                outcome = "skipped" if tag == "skipped" else ("fail" if tag == "failure" else "error")
                text = element.get("message") or element.text or tag
                message = readable(text.strip().splitlines()[0]) if text.strip() else tag
                break
        outcomes[(case.get("classname", ""), case.get("name", ""))] = (outcome, message, float(case.get("time", 0.0)))
    return outcomes


class SubmissionError(ValueError):
    """A graded file of a submission that is not graded (a link, not a file, too large)."""


MAX_FILE_BYTES = 1 << 20
"""A graded file larger than this is not a lab's answer."""


def clean_tree(reference: Path, lab: Lab, track: Track, out: Path) -> Path:
    """The tree every submission of ``lab`` is graded in: ``reference``'s handout of the
    lab (its default skeleton: the reference minus the lab's answers, hidden tests
    included), into which ``place_submission`` copies a submission's graded files."""
    make_skeleton(reference, out, lab, track)
    return out


def place_submission(base: Path, submission: Path, track: Track, tree: Path) -> str | None:
    """Copy the clean tree ``base`` to ``tree`` and the track's files of ``submission``
    onto it, nothing else of the submission (no conftest.py, sitecustomize or .pth file of
    it is ever imported). Returns what was wrong with its files, or None."""
    shutil.copytree(base, tree, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    problems = []
    for name in track.files:
        try:
            (tree / name).write_bytes(submitted_file(submission, name))
        except SubmissionError as error:
            problems.append(f"{error} (graded: the handout's stub)")
    return "; ".join(problems) or None


def submitted_file(submission: Path, name: str) -> bytes:
    """The bytes of ``submission``'s graded file ``name``, read as the grader (root) reads
    it: never through a link, which could point at the reference or at a file only root
    may read."""
    path = submission / name
    if path.resolve() != submission.resolve() / name:
        raise SubmissionError(f"{name} is a symbolic link or reached through one: hand in the file itself")
    if not path.is_file():
        raise SubmissionError(f"{name} is not in the submission")
    data = sandbox.read_private_file(path, MAX_FILE_BYTES)
    if data is None:
        raise SubmissionError(f"{name} is not a regular file of at most {MAX_FILE_BYTES >> 10} KiB")
    return data


DEFAULT_MEMORY_MB = 4096
"""A sandboxed grade's memory, all its processes together (lab 3's Mininet network, switch
and workers fit), and each one's address space."""
DEFAULT_PROCESSES = 512
"""Processes and threads of a sandboxed grade at once: lab 3's run has a switch and workers."""


def limits(lab: Lab, track: Track, cap_s: float | None = None, memory_mb: int | None = None) -> sandbox.Limits:
    """The caps of one submission's sandboxed grade: ``cap_s`` (else lab.yaml's ``cap_s``,
    else the sum of the tests' timeouts and SLACK_S) and ``memory_mb``."""
    wall = cap_s or lab.cap_s or lab.timeout_s * len(track.tests) + SLACK_S
    return sandbox.Limits(wall, (memory_mb or DEFAULT_MEMORY_MB) << 20, DEFAULT_PROCESSES)


def pytest_env(tree: Path) -> dict[str, str]:
    """The environment of the pytest run: the tree first on PYTHONPATH, no stale bytecode."""
    path = os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


def syntax_problem(tree: Path, files: tuple[str, ...]) -> str | None:
    """The first syntax error in the Python ones of ``files`` (of ``tree``) as 'path:line:
    SyntaxError: message' (a P4 file's errors are p4c's to report: a test's setup line)."""
    for name in (name for name in files if name.endswith(".py")):
        path = tree / name
        try:
            compile(path.read_bytes(), name, "exec")
        except SyntaxError as error:
            return f"{name}:{error.lineno}: {type(error).__name__}: {error.msg}"
        except OSError:  # a missing file is the tests' to report
            continue
    return None


def grade(lab: Lab, track: Track, tree: Path, limits: sandbox.Limits | None = None, problem: str | None = None) -> Grade:
    """Run ``track``'s graded tests in ``tree`` and score them: in place, or with ``limits``
    in the sandbox (``tree`` then is a clean tree: ``clean_tree`` and ``place_submission``;
    ``problem``, what placing it found wrong)."""
    tree = tree.resolve()
    problem = problem or syntax_problem(tree, track.files)
    present = [test for test in track.tests if (tree / test.id.split("::")[0]).is_file()]
    budget = lab.timeout_s * max(len(present), 1) + SLACK_S
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="labs-grade-") as scratch:
        out = Path(scratch) / "out"
        out.mkdir()
        inside, where = (sandbox.TREE, sandbox.OUT) if limits else (tree, out)
        command = [
            sys.executable, "-m", "pytest", *[test.id for test in present],
            f"--timeout={lab.timeout_s:g}", f"--junitxml={where / JUNIT}",
            "-p", "no:cacheprovider", "--continue-on-collection-errors", "-q", "--tb=line",
        ]  # fmt: skip
        if limits is None:
            exit_status, output = _run_in_place(command, tree, budget)
        else:
            os.chown(out, sandbox.SANDBOX_ID, sandbox.SANDBOX_ID)
            (Path(scratch) / "root").mkdir()
            ran = sandbox.run(command, root=Path(scratch) / "root", tree=tree, out=out, limits=limits, toolchain=track_toolchain(track))
            exit_status, output = ran.returncode, ran.output
            if ran.timed_out:
                exit_status, output = -1, f"the submission's tests did not finish within its {limits.wall_s:g} s cap"
            elif ran.capped:  # the report's first line, and the last one of the output: what a test that did not run says
                problem, output = "; ".join(filter(None, [ran.capped, problem])), f"{output}\n{ran.capped}"
        junit = sandbox.read_private_file(out / JUNIT)
        outcomes = read_junit(junit) if junit else {}
    why_not_run = _last_line(output) if present else "no graded test file is in the tree"
    results = []
    for test in track.tests:
        outcome, message, seconds = outcomes.get(junit_key(test.id), ("not run", why_not_run, 0.0))
        if test not in present:
            message = f"{test.id.split('::')[0]} is not in the tree"
        earned = test.points if outcome == PASSED else 0
        results.append(TestResult(test.id, test.points, earned, outcome, message, round(seconds, 2)))
    return Grade(lab.number, track.name, str(tree), sum(r.earned for r in results), track.points,
                 round(time.monotonic() - started, 1), results, exit_status, problem)  # fmt: skip


def track_toolchain(track: Track) -> Toolchain:
    """Where this machine has the tools of the switch targets ``track`` needs (lab.yaml's
    ``needs`` naming a target: bmv2 for a p4 track), for its sandbox to hold them."""
    found = [REGISTRY[need].toolchain() for need in track.needs if need in REGISTRY]
    return Toolchain(tuple(dict.fromkeys(folder for tools in found for folder in tools.executables)),
                     tuple(dict.fromkeys(folder for tools in found for folder in tools.python)),
                     {name: value for tools in found for name, value in tools.variables.items()})  # fmt: skip


def _run_in_place(command: list[str], tree: Path, budget: float) -> tuple[int, str]:
    """pytest in ``tree``, as the grader's user: a student grading their own tree."""
    try:
        run = subprocess.run(command, cwd=tree, env=pytest_env(tree), capture_output=True, text=True,
                             timeout=budget, stdin=subprocess.DEVNULL)  # fmt: skip
        return run.returncode, run.stdout + run.stderr
    except subprocess.TimeoutExpired:
        return -1, f"pytest did not finish within {budget:g} s"


def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "pytest printed nothing"


def score_table(lab: Lab, grade_: Grade, width: int = 100) -> str:
    """The table a student reads: test, points, result, the first line of the failure."""
    name_width = max(len("test"), *(len(r.id) for r in grade_.tests))
    lines = [f"your code does not run: {grade_.problem}"] if grade_.problem else []
    lines += [
        f"lab {lab.number} ({grade_.track} track): {lab.title} -- {grade_.tree}",
        f"  {'test':<{name_width}}  points  result   first line of the failure",
    ]
    for r in grade_.tests:
        message = r.message if len(r.message) <= width else r.message[: width - 3] + "..."
        lines.append(f"  {r.id:<{name_width}}  {r.earned:>2}/{r.points:<3}  {r.outcome:<7}  {message}".rstrip())
    percent = 100 * grade_.score / grade_.max_score
    lines.append(f"score: {grade_.score}/{grade_.max_score} ({percent:.0f} %) in {grade_.seconds:g} s")
    return "\n".join(lines)


def write_report(grade_: Grade, path: Path, student: str | None = None) -> None:
    """The grade as JSON (every test with its outcome and message) at ``path``; in a batch,
    with the ``student``'s id (their submission folder's name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    report = asdict(grade_)
    first = {"problem": report.pop("problem")} | ({"student": student} if student else {})
    path.write_text(json.dumps({**first, **report, "full_marks": grade_.full_marks}, indent=2) + "\n")


def gradescope_results(lab: Lab, grade_: Grade) -> dict:
    """The grade as Gradescope's autograder reads it (its ``results.json``, the fields
    labs/gradescope.schema.yaml holds): a score and a maximum per graded test, with its
    status, and its outcome and first line as its output, every test visible to the student
    (what the grader prints is what they may read)."""
    tests = [{"name": r.id, "number": str(i + 1), "score": r.earned, "max_score": r.points,
              "status": "passed" if r.outcome == PASSED else "failed",
              "output": r.outcome if not r.message else f"{r.outcome}: {r.message}", "visibility": "visible"}
             for i, r in enumerate(grade_.tests)]  # fmt: skip
    summary = f"lab {lab.number} ({grade_.track} track): {grade_.score}/{grade_.max_score}"
    return {"score": grade_.score, "execution_time": grade_.seconds, "output_format": "text", "visibility": "visible",
            "stdout_visibility": "visible", "tests": tests,
            "output": f"your code does not run: {grade_.problem}\n{summary}" if grade_.problem else summary}  # fmt: skip


def write_gradescope(lab: Lab, grade_: Grade, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(gradescope_results(lab, grade_), indent=2) + "\n")


def default_report(tree: Path, lab: Lab, track: Track) -> Path:
    """Where a grade goes unless told: the tree's results/labs/ (ignored by git)."""
    return tree / "results" / "labs" / f"lab{lab.number}-{track.name}.json"
