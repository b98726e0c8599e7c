"""Grade a tree for one lab: run its graded tests, score them, print and save the result.

A student grades their own tree in place: the tests run in a pytest subprocess with the
tree as working directory and first on PYTHONPATH, so the tree's code is what is imported
(and what the switch and worker processes the tests start import), never the checkout the
grader itself was installed from; pytest-timeout bounds every test, and pytest's JUnit XML
report says what happened to each one. That is a student's check: the student's code runs
in the process that decides the verdict.

An instructor grades a submission as hostile, for the record: only its graded files,
copied onto a clean tree made from the fork's committed files (``clean_tree``,
``place_submission``), run in the sandbox (labs/sandbox.py) under caps. A test with
``calls`` is decided outside the sandbox (labs/record.py): the sandbox computes outputs
with the submission's code, the grader compares them with the reference's. Only a test
without calls (a track whose graded files are not Python: the P4 program runs in bmv2,
which writes no file) takes pytest's verdict from the sandbox. A test scores its points
only if it passed: a failure, an error, a skip (say, bmv2 absent on the P4 track) or a
test that did not run scores nothing, and the table says why in one line.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from labs import record, sandbox
from labs.catalog import GradedTest, Lab, Track
from labs.scratch import scratch_folder
from labs.skeleton import make_skeleton
from labs.text import shown
from base.yamlschema import ConfigError
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
    visibility: str = "visible"
    """lab.yaml's: when the student may see this test (``student_view``)."""
    verdict: str = "pytest"
    """Who decided it: 'grader' (outputs compared outside the sandbox), 'sandbox' (pytest,
    in a sandbox holding no Python file of the submission) or 'pytest' (in a process the
    submission's code runs in: a student's grade in place, or a test without calls)."""


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
        outcomes[(case.get("classname", ""), case.get("name", ""))] = (outcome, shown(message), _seconds(case.get("time")))
    return outcomes


def _seconds(text: str | None) -> float:
    """A test's time as the report gives it: a finite number of seconds, else 0."""
    try:
        seconds = float(text or 0.0)
    except ValueError:
        return 0.0
    return seconds if math.isfinite(seconds) and seconds >= 0 else 0.0


class SubmissionError(ValueError):
    """A graded file of a submission that is not graded (a link, not a file, too large)."""


MAX_FILE_BYTES = 1 << 20
"""A graded file larger than this is not a lab's answer."""


def clean_tree(reference: Path, lab: Lab, track: Track, out: Path) -> Path:
    """The tree every submission of ``lab`` is graded in: ``reference``'s handout of the
    lab made from its committed files (its default skeleton: the reference minus the lab's
    answers, without its non-visible tests' files), into which ``place_submission`` copies
    a submission's graded files."""
    make_skeleton(reference, out, lab, track, committed=True)
    return out


def reference_tree(reference: Path, base: Path, track: Track, out: Path) -> Path:
    """The clean tree ``base`` with ``reference``'s committed graded files: the tree whose
    outputs a submission's must equal (labs/record.py)."""
    shutil.copytree(base, out, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    for name in track.files:
        (out / name).write_bytes(committed_file(reference, name))
    return out


def committed_file(checkout: Path, name: str) -> bytes:
    """``name`` as ``checkout``'s last commit holds it."""
    try:
        return subprocess.run(["git", "-C", str(checkout), "show", f"HEAD:{name}"], capture_output=True, check=True).stdout
    except subprocess.CalledProcessError as error:
        raise SubmissionError(f"{checkout} has no committed {name}: {error.stderr.decode(errors='replace').strip()}") from None


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
    """The bytes of ``submission``'s graded file ``name`` (at its path in the repository,
    or, where it is not there, alone at the submission's root), read as the grader (root)
    reads it: never through a link, which could point at the reference or at a file only
    root may read."""
    path = submission / name
    if not os.path.lexists(path) and os.path.lexists(submission / Path(name).name):
        path = submission / Path(name).name  # the file alone, uploaded without its folders (Gradescope's drag and drop)
    try:
        linked = path.resolve() != submission.resolve() / path.relative_to(submission)
    except (OSError, RuntimeError):  # a loop of links, a path too long
        linked = True
    if linked:
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
            return shown(f"{name}:{error.lineno}: {type(error).__name__}: {error.msg}")
        except ValueError as error:  # NUL bytes: a file saved as UTF-16
            return f"{name}: {error}: save it as UTF-8 text"
        except (RecursionError, MemoryError):  # an expression nested or long beyond the compiler's stack
            return f"{name}: too deeply nested or too long for Python's compiler"
        except OSError:  # a missing file is the tests' to report
            continue
    return None


def grade(lab: Lab, track: Track, tree: Path, limits: sandbox.Limits | None = None, problem: str | None = None,
          expected: dict[str, object] | None = None, base: Path | None = None) -> Grade:  # fmt: skip
    """Run ``track``'s graded tests in ``tree`` and score them: in place (pytest's verdicts),
    or with ``limits`` in the sandbox (``tree`` then is a clean tree: ``clean_tree`` and
    ``place_submission``; ``problem``, what placing it found wrong), the tests with calls
    decided against ``expected``, the reference's outputs (``expected_outputs``), the
    others by pytest, one session per set of files they use (lab.yaml's ``uses``), the
    track's other files the clean tree ``base``'s."""
    tree = tree.resolve()
    problem = problem or syntax_problem(tree, track.files)
    started = time.monotonic()
    recorded = [test for test in track.tests if limits is not None and test.calls]
    by_pytest = [test for test in track.tests if test not in recorded]
    present = [test for test in by_pytest if (tree / test.file).is_file()]
    outcomes: dict[GradedTest, tuple[str, str, float]] = {}
    exit_status = 0
    if recorded:
        assert limits is not None and expected is not None
        calls = record.numbered(recorded)
        timed_out = None
        for seen in (True, False):  # apart: what the student reads never comes from a run that saw a hidden test's inputs
            group = [numbered for numbered in calls if (numbered[1].visibility == "visible") == seen]
            if not group:
                continue
            if timed_out:  # one run out of time is the submission's whole time: no second cap's worth
                outcomes.update({test: ("not run", timed_out, 0.0) for _, test, _ in group})
                continue
            computed = record.compute(tree, group, limits, track_toolchain(track))
            status, output, capped = _sandbox_outcome(computed.outcome, limits)
            timed_out = output if computed.outcome.timed_out else None
            exit_status = exit_status or status
            problem = "; ".join(dict.fromkeys(filter(None, [capped, problem]))) or None
            why_not_run = _last_line(output, "the harness wrote no output")
            for test in dict.fromkeys(test for _, test, _ in group):
                outcome, message = record.verdict(test, group, expected, computed, why_not_run)
                outcomes[test] = (outcome, message, 0.0)
    unmixed: set[GradedTest] = set()
    for uses, tests in _sessions(present, track, limits is not None and base is not None).items():
        with _handout_files(tree, base, [name for name in track.files if name not in uses]):
            status, junit, output, capped = _pytest(lab, tests, tree, limits, track_toolchain(track))
        exit_status = exit_status or status
        problem = "; ".join(dict.fromkeys(filter(None, [capped, problem]))) or None
        if limits is not None and not any(name.endswith(".py") for name in uses):
            unmixed.update(tests)
        for test in tests:
            outcomes[test] = junit.get(junit_key(test.id), ("not run", _last_line(output, "pytest printed nothing"), 0.0))
    results = []
    for test in track.tests:
        outcome, message, seconds = outcomes.get(test, ("not run", f"{test.file} is not in the tree", 0.0))
        earned = test.points if outcome == PASSED else 0
        verdict = "grader" if test in recorded else "sandbox" if test in unmixed else "pytest"
        results.append(TestResult(test.id, test.points, earned, outcome, message, round(seconds, 2), test.visibility, verdict))
    return Grade(lab.number, track.name, str(tree), sum(r.earned for r in results), track.points,
                 round(time.monotonic() - started, 1), results, exit_status, problem)  # fmt: skip


def _sessions(tests: list[GradedTest], track: Track, apart: bool) -> dict[tuple[str, ...], list[GradedTest]]:
    """``tests`` by the track's files each uses: one pytest session each, ``apart`` (else one for all)."""
    sessions: dict[tuple[str, ...], list[GradedTest]] = {}
    for test in tests:
        uses = test.uses if apart and test.uses is not None else track.files
        sessions.setdefault(tuple(sorted(uses)), []).append(test)
    return sessions


@contextlib.contextmanager
def _handout_files(tree: Path, base: Path | None, names: list[str]) -> Iterator[None]:
    """``tree`` with its files ``names`` as the clean tree ``base`` has them (the handout's
    stubs), the submission's put back afterwards."""
    if base is None or not names:
        yield
        return
    kept = {name: (tree / name).read_bytes() for name in names}
    try:
        for name in names:
            (tree / name).write_bytes((base / name).read_bytes())
        yield
    finally:
        for name, data in kept.items():
            (tree / name).write_bytes(data)


def failed_grade(lab: Lab, track: Track, tree: Path, problem: str) -> Grade:
    """A 0 for ``tree`` that says why its tests could not be run at all."""
    results = [TestResult(test.id, test.points, 0, "not run", "see the report's first line", 0.0, test.visibility, "grader")
               for test in track.tests]  # fmt: skip
    return Grade(lab.number, track.name, str(tree), 0, track.points, 0.0, results, -1, shown(problem))


def expected_outputs(lab: Lab, track: Track, reference: Path, limits: sandbox.Limits) -> dict[str, object]:
    """The outputs of ``track``'s calls with the reference's code (``reference_tree``), in
    the sandbox as a submission's are: what each submission's must equal. A call the
    reference gives no output for is the lab's error, not a submission's."""
    calls = record.numbered(test for test in track.tests if test.calls)
    if not calls:
        return {}
    computed = record.compute(reference, calls, limits, track_toolchain(track))
    missing = [(test, call) for id_, test, call in calls if id_ not in computed.outputs]
    if missing:
        test, call = missing[0]
        raise ConfigError(f"lab {lab.number}: the reference gives no output for {record.call_text(call)} of {test.id}:"
                          f" {_last_line(computed.outcome.output, 'the harness printed nothing')}")  # fmt: skip
    broken = [(test, call, computed.outputs[id_]) for id_, test, call in calls if record.raised_as_broken(computed.outputs[id_])]
    if broken:  # a submission raising the same would match it: every student would earn the test
        test, call, output = broken[0]
        raise ConfigError(f"lab {lab.number}: the reference raises {output['raises']} for {record.call_text(call)} of {test.id}"
                          f" ({output.get('message', '')}): the lab's code is broken, not a submission's")  # fmt: skip
    return computed.outputs


def _pytest(lab: Lab, tests: list[GradedTest], tree: Path, limits: sandbox.Limits | None,
            toolchain: Toolchain) -> tuple[int, dict[tuple[str, str], tuple[str, str, float]], str, str | None]:  # fmt: skip
    """pytest on ``tests`` in ``tree``, in place or in the sandbox: its exit status, the
    outcomes its JUnit report gives, its output and what a cap cut short."""
    with scratch_folder("labs-grade-") as scratch:
        out = scratch / "out"
        out.mkdir()
        inside, where = (sandbox.TREE, sandbox.OUT) if limits else (tree, out)
        command = [
            sys.executable, "-m", "pytest", *[test.id for test in tests],
            f"--timeout={lab.timeout_s:g}", f"--junitxml={where / JUNIT}",
            "-p", "no:cacheprovider", "--continue-on-collection-errors", "-q", "--tb=line",
        ]  # fmt: skip
        capped = None
        if limits is None:
            exit_status, output = _run_in_place(command, tree, lab.timeout_s * len(tests) + SLACK_S)
        else:
            os.chown(out, sandbox.SANDBOX_ID, sandbox.SANDBOX_ID)
            (scratch / "root").mkdir()
            ran = sandbox.run(command, root=scratch / "root", tree=tree, out=out, limits=limits, toolchain=toolchain)
            exit_status, output, capped = _sandbox_outcome(ran, limits)
        junit = sandbox.read_private_file(out / JUNIT)
        return exit_status, read_junit(junit) if junit else {}, output, capped


def _sandbox_outcome(ran: sandbox.Outcome, limits: sandbox.Limits) -> tuple[int, str, str | None]:
    """A sandboxed run's exit status and output, and what cap stopped it (the report's first
    line, and the last line of the output: what a test that did not run says). A run that
    hit the wall cap may have hit others on the way (printing 100 MB takes long on a busy
    machine): those are said too."""
    if ran.timed_out:
        return -1, f"the submission's tests did not finish within its {limits.wall_s:g} s cap", ran.capped
    if ran.capped:
        return ran.returncode, f"{ran.output}\n{ran.capped}", ran.capped
    return ran.returncode, ran.output, None


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


def _last_line(output: str, otherwise: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return shown(lines[-1][:500]) if lines else otherwise


def score_table(lab: Lab, grade_: Grade, width: int = 100) -> str:
    """The table a grader prints: test, points, result, the first line of the failure
    (every test, hidden ones included: the instructor's view; text of the submission's
    escaped, so that it cannot move the cursor, clear the screen or add a line)."""
    name_width = max(len("test"), *(len(r.id) for r in grade_.tests))
    lines = [f"your code does not run: {shown(grade_.problem)}"] if grade_.problem else []
    lines += [
        f"lab {lab.number} ({grade_.track} track): {lab.title} -- {shown(grade_.tree)}",
        f"  {'test':<{name_width}}  points  result   first line of the failure",
    ]
    for r in grade_.tests:
        message = shown(r.message)
        message = message if len(message) <= width else message[: width - 3] + "..."
        lines.append(f"  {r.id:<{name_width}}  {r.earned:>2}/{r.points:<3}  {r.outcome:<7}  {message}".rstrip())
    percent = 100 * grade_.score / grade_.max_score
    lines.append(f"score: {grade_.score}/{grade_.max_score} ({percent:.0f} %) in {grade_.seconds:g} s")
    inside = [r for r in grade_.tests if r.verdict == "pytest"]
    if inside and any(r.verdict != "pytest" for r in grade_.tests):
        lines.append(f"note: {sum(r.points for r in inside)} of these {grade_.max_score} points are pytest's verdicts, made in the"
                     f" sandbox where the submission's code runs ({len(inside)} tests without calls): not of record"
                     " (labs/README.md, \"The grade of record\")")  # fmt: skip
    return "\n".join(lines)


def write_report(grade_: Grade, path: Path, student: str | None = None) -> None:
    """The grade as strict JSON (every test with its outcome and message) at ``path``; in a
    batch, with the ``student``'s id (their submission folder's name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    report = asdict(grade_)
    first = {"problem": report.pop("problem")} | ({"student": student} if student else {})
    path.write_text(json.dumps({**first, **report, "full_marks": grade_.full_marks}, indent=2, allow_nan=False) + "\n")


HIDDEN = "hidden"


def gradescope_results(lab: Lab, grade_: Grade) -> dict:
    """The grade as Gradescope's autograder reads it (its ``results.json``, the fields
    labs/gradescope.schema.yaml holds): a score and a maximum per graded test, with its
    status, its outcome and first line as its output, and lab.yaml's visibility. A hidden
    test is named only by its number and says only whether it passed (Gradescope keeps it
    from the student, and what is not in the file cannot leak); the grader's printed table,
    which names every test, is kept from the student too (``stdout_visibility``)."""
    tests = []
    for i, r in enumerate(grade_.tests):
        detail = r.outcome if not r.message else f"{r.outcome}: {shown(r.message)}"
        tests.append({"name": f"hidden test {i + 1}" if r.visibility == HIDDEN else r.id, "number": str(i + 1),
                      "score": r.earned, "max_score": r.points, "status": "passed" if r.outcome == PASSED else "failed",
                      "output": r.outcome if r.visibility == HIDDEN else detail, "visibility": r.visibility})  # fmt: skip
    summary = f"lab {lab.number} ({grade_.track} track): {grade_.score}/{grade_.max_score}"
    return {"score": grade_.score, "execution_time": grade_.seconds, "output_format": "text", "visibility": "visible",
            "stdout_visibility": "hidden", "tests": tests,
            "output": f"your code does not run: {shown(grade_.problem)}\n{summary}" if grade_.problem else summary}  # fmt: skip


def write_gradescope(lab: Lab, grade_: Grade, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(gradescope_results(lab, grade_), indent=2, allow_nan=False) + "\n")


def default_report(tree: Path, lab: Lab, track: Track) -> Path:
    """Where a grade goes unless told: the tree's results/labs/ (ignored by git)."""
    return tree / "results" / "labs" / f"lab{lab.number}-{track.name}.json"
