"""Grade a tree for one lab: run its graded tests, score them, print and save the result.

The tests run in a pytest subprocess with the tree as working directory and first on
PYTHONPATH, so the tree's code is what is imported (and what the switch and worker
processes the tests start import: they run from the tree too), never the checkout the
grader itself was installed from. pytest-timeout bounds every test; pytest's JUnit XML
report says what happened to each one. A test scores its points only if it passed: a
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

from labs.catalog import Lab, Track

PASSED = "pass"
SLACK_S = 120.0
"""Beyond the sum of the per-test timeouts: pytest start-up, collection, fixtures' teardown."""
GRADED_FOLDERS = ("tests", "labs")
"""What ``--tests-from`` replaces in the tree: the graded tests, their fixtures, the grader's lab files."""


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


def read_junit(path: Path) -> dict[tuple[str, str], tuple[str, str, float]]:
    """Per (classname, name): outcome, first message line, seconds."""
    outcomes = {}
    for case in ElementTree.parse(path).iter("testcase"):
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


def replace_graded_files(tree: Path, source: Path) -> None:
    """Put ``source``'s tests/ and labs/ into ``tree``: grade with the instructor's tests, not
    the student's copy (which the student could have changed), hidden tests included."""
    for folder in GRADED_FOLDERS:
        if not (source / folder).is_dir():
            raise FileNotFoundError(f"--tests-from {source}: no {folder}/ folder there")
        shutil.rmtree(tree / folder, ignore_errors=True)
        shutil.copytree(source / folder, tree / folder, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))


def pytest_env(tree: Path) -> dict[str, str]:
    """The environment of the pytest run: the tree first on PYTHONPATH, no stale bytecode."""
    path = os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}


def syntax_problem(tree: Path, files: tuple[str, ...]) -> str | None:
    """The first syntax error in ``files`` (of ``tree``) as 'path:line: SyntaxError: message'."""
    for name in files:
        path = tree / name
        try:
            compile(path.read_bytes(), name, "exec")
        except SyntaxError as error:
            return f"{name}:{error.lineno}: {type(error).__name__}: {error.msg}"
        except OSError:  # a missing file is the tests' to report
            continue
    return None


def grade(lab: Lab, track: Track, tree: Path) -> Grade:
    """Run ``track``'s graded tests in ``tree`` and score them."""
    tree = tree.resolve()
    problem = syntax_problem(tree, track.files)
    present = [test for test in track.tests if (tree / test.id.split("::")[0]).is_file()]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="labs-grade-") as scratch:
        junit = Path(scratch) / "junit.xml"
        command = [
            sys.executable, "-m", "pytest", *[test.id for test in present],
            f"--timeout={lab.timeout_s:g}", f"--junitxml={junit}",
            "-p", "no:cacheprovider", "--continue-on-collection-errors", "-q", "--tb=line",
        ]  # fmt: skip
        budget = lab.timeout_s * max(len(present), 1) + SLACK_S
        try:
            run = subprocess.run(command, cwd=tree, env=pytest_env(tree), capture_output=True, text=True,
                                 timeout=budget, stdin=subprocess.DEVNULL)  # fmt: skip
            exit_status, output = run.returncode, run.stdout + run.stderr
        except subprocess.TimeoutExpired:
            exit_status, output = -1, f"pytest did not finish within {budget:g} s"
        outcomes = read_junit(junit) if junit.exists() else {}
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


def write_report(grade_: Grade, path: Path) -> None:
    """The grade as JSON (every test with its outcome and message) at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    report = asdict(grade_)
    path.write_text(json.dumps({"problem": report.pop("problem"), **report, "full_marks": grade_.full_marks}, indent=2) + "\n")


def gradescope_results(lab: Lab, grade_: Grade) -> dict:
    """The grade as Gradescope's autograder reads it (its ``results.json``): a score and a
    maximum per graded test, with the test's outcome and first line as its output, every
    test visible to the student (what the grader prints is what they may read)."""
    tests = [{"name": r.id, "number": str(i + 1), "score": r.earned, "max_score": r.points,
              "output": r.outcome if not r.message else f"{r.outcome}: {r.message}", "visibility": "visible"}
             for i, r in enumerate(grade_.tests)]
    summary = f"lab {lab.number} ({grade_.track} track): {grade_.score}/{grade_.max_score}"
    return {"score": grade_.score, "execution_time": grade_.seconds, "visibility": "visible", "stdout_visibility": "visible",
            "output": f"your code does not run: {grade_.problem}\n{summary}" if grade_.problem else summary, "tests": tests}


def write_gradescope(lab: Lab, grade_: Grade, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(gradescope_results(lab, grade_), indent=2) + "\n")


def default_report(tree: Path, lab: Lab, track: Track) -> Path:
    """Where a grade goes unless told: the tree's results/labs/ (ignored by git)."""
    return tree / "results" / "labs" / f"lab{lab.number}-{track.name}.json"
