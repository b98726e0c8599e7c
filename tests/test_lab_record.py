"""The grade of record (labs/record.py, labs/harness.py): what reaches the sandbox, what comes back.

An instructor's grade decides each test outside the sandbox, from outputs the submission's
code computed in it. These tests hold what may enter the sandbox (inputs and the handout's
harness: never a hidden test's file, name or expected value, never a file the instructor
did not commit), what may leave it for the student to read (no hidden test, no control
character), and that one submission's failure, however it fails, is its own 0 with a
reason while the rest of the class is graded.
"""

from __future__ import annotations

import csv
import json
import math
import os
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from labs import catalog, record
from labs.__main__ import main
from labs.catalog import Call, GradedTest
from labs.grade import read_junit, track_toolchain, write_report
from labs.harness import encode, output
from labs.markers import scan_file
from labs.sandbox import SandboxError, check_can_sandbox, toolchain_folders
from labs.skeleton import copy_tree, fill_regions, make_skeleton
from labs.text import shown
from protocol.params import REPO_ROOT
from tests.conftest import IN_SANDBOX_GROUP
from tests.test_labs import git_checkout

pytestmark = IN_SANDBOX_GROUP  # grades in the sandbox (tests/conftest.py)

LAB = catalog.by_number(0)
TRACK = LAB.track(None)
ANSWER_FILE = "methods/switchml.py"
CORRECT = "return k * link_bps / (8 * frame_bytes(k))"
HIDDEN_FILE = "labs/00-run-and-measure/tests/test_hidden.py"
# the words the snooping answer looks for, joined here only: this file is in every tree it searches
HIDDEN_NAME = "test_bound_at_" + "seven_megabits"
SECRET = "SECRET-OF-THE-" + "HIDDEN-TEST"
EXPECTED = "1530" + "05"
PRIVATE = {"grades.csv": "PRIVATE-" + "GRADES", "answers/lab0.md": "PRIVATE-" + "ANSWER-NOTES",
           "submissions/alice/methods/switchml.py": "PRIVATE-" + "CLASSMATE"}  # fmt: skip
UNCOMMITTED = "PRIVATE-" + "UNCOMMITTED-CHANGE"


# ---- the parts, without a sandbox ---------------------------------------------------------------


def test_an_output_is_the_value_the_buffer_or_the_exception_never_a_verdict() -> None:
    quantize = "protocol.quantize.quantize"
    got = output(quantize, [{"array": [0.5, 1.5], "dtype": "float64"}, 1.0], {"out": {"array": [0, 0], "dtype": ">i4"}})
    assert got["returned"] == {"argument": 1}, "quantize returned its out argument"
    assert got["arrays"][1] == {"dtype": ">i4", "shape": [2], "values": [0, 2]}, "the buffer written in place is an output"
    assert output("analysis.switchml.models.slot_round_trip_s", [2.5e6, 32, -1.0], {})["raises"] == "ValueError"
    assert encode(float("nan")) == {"float": "nan"}, "strict JSON has no NaN"


def test_a_call_that_never_returns_is_its_own_timeout_and_the_next_call_runs(monkeypatch) -> None:
    """A timer of 0 s resends forever at one simulated instant: that call's output is a
    CallTimeout, which code that catches every Exception cannot swallow, and the run goes on."""
    from labs import harness

    monkeypatch.setattr(harness, "CALL_TIMEOUT_S", 0.5)
    assert output("time.sleep", [60], {}) == {"raises": "CallTimeout", "message": "did not return within 0.5 s"}
    assert output("math.sqrt", [4.0], {}) == {"returned": 2.0}


def test_outputs_equal_the_references_within_the_tests_tolerance_and_an_exception_by_its_type() -> None:
    assert record.difference(54644.80874316939, 54644.8087431694, 1e-9) is None
    assert "is 1.0, the reference's 54644.8" in record.difference(54644.8, 1.0, 1e-9)
    assert record.difference({"raises": "ValueError", "message": "a"}, {"raises": "ValueError", "message": "b"}, 1e-9) is None
    assert record.difference({"raises": "ValueError"}, {"returned": 1}, 1e-9) == "returned, the reference raises ValueError"
    assert record.difference([1, 2], [1, 2, 3], 0) == "the value has 3 items, the reference's 2"
    assert record.difference({"a": True}, {"a": 1}, 0) is not None, "True is not 1"


def test_the_harness_output_is_read_strictly_and_first_come_first_kept() -> None:
    lines = b'{"call": "c0", "output": 1}\n{"call": "c1", "output": NaN}\n{"call": "c0", "output": 2}\nnot json\n[1]\n'
    assert record.read_outputs(lines) == {"c0": 1}
    assert record.read_outputs(b"[" * 100_000) == {}, "nesting beyond the parser's stack is no output"


def test_a_hidden_tests_verdict_names_only_the_call_it_failed() -> None:
    test = GradedTest("t.py::test", 1, "fail", (Call("analysis.models.busbw", (1.0, 2)),), "hidden")
    calls = record.numbered([test])
    computed = record.Computed({"c0": {"returned": 2.0}}, None)  # type: ignore[arg-type]
    assert record.verdict(test, calls, {"c0": {"returned": 1.0}}, computed, "") == ("fail", "busbw(1.0, 2): returned is 2.0, the reference's 1.0")
    assert record.verdict(test, calls, {"c0": {"returned": 1.0}}, record.Computed({}, None), "capped") == ("not run", "capped")  # type: ignore[arg-type]


def test_control_characters_are_shown_escaped() -> None:
    assert shown("\x1b]0;owned\x07\x1b[2J12/12\nPASSED\u202e") == "\\x1b]0;owned\\x07\\x1b[2J12/12\\x0aPASSED\\u202e"
    assert shown("déjà vu: 12/12") == "déjà vu: 12/12"


@pytest.mark.parametrize("time", ["NaN", "inf", "-1", "12 s", ""])
def test_a_bad_time_in_a_junit_report_is_zero_seconds(time: str) -> None:
    report = f'<testsuite><testcase classname="a" name="b" time="{time}"/></testsuite>'.encode()
    assert read_junit(report) == {("a", "b"): ("pass", "", 0.0)}


def test_a_report_is_strict_json(tmp_path: Path) -> None:
    from labs.grade import Grade, TestResult

    grade = Grade(0, "python", "t", 0, 1, 0.5, [TestResult("x", 1, 0, "fail", "\x1b[31m", 0.0)], 1)
    write_report(grade, tmp_path / "r.json")
    json.loads((tmp_path / "r.json").read_text(), parse_constant=lambda name: pytest.fail(f"{name} in the report"))


def test_a_lab_that_does_not_exist_is_refused_in_one_line(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert main(["skeleton", "0", "--out", str(tmp_path / "h"), "--keep", "7"]) == 2
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == ["--keep 7: no such lab; there are labs 0, 1, 2, 3, 4, 5"]


def test_every_call_of_every_lab_gives_the_reference_an_output_and_the_skeleton_its_expected_verdicts(tmp_path: Path) -> None:
    """The calls are data an instructor writes: one that the reference's code cannot make
    (a misspelt function, an argument YAML read as text) would pass every submission
    alike. Run without the sandbox: the reference's outputs must be complete, and the
    handout's must differ exactly where lab.yaml says its skeleton fails."""
    from switches.target import Toolchain

    for lab in catalog.all_labs():
        for track in lab.tracks.values():
            calls = record.numbered(test for test in track.tests if test.calls)
            if not calls:
                continue
            reference = record.compute(REPO_ROOT, calls, None, Toolchain())
            assert {id_ for id_, _, _ in calls} <= set(reference.outputs), reference.outcome.output[-2000:]
            for id_, _, call in calls:
                raised = reference.outputs[id_].get("raises")
                assert raised in (None, "ValueError"), f"lab {lab.number}: {record.call_text(call)} raised {raised} with the reference"
            skeleton = tmp_path / f"{lab.number}-{track.name}"
            make_skeleton(REPO_ROOT, skeleton, lab, track)
            handout = record.compute(skeleton, calls, None, Toolchain())
            for test in dict.fromkeys(test for _, test, _ in calls):
                outcome, message = record.verdict(test, calls, reference.outputs, handout, "")
                assert (outcome == "pass") == (test.skeleton == "pass"), f"lab {lab.number} {test.id}: {outcome} {message}"


def test_every_point_of_the_shipped_labs_is_of_record() -> None:
    """Each graded test has calls (the grader decides it) or runs in a pytest session that
    holds none of the submission's Python (lab.yaml's ``uses``): a test that does neither
    is pytest's verdict from a process the submission's code can forge."""
    forgeable = [f"lab {lab.number} {track.name}: {test.id}" for lab in catalog.all_labs() for track in lab.tracks.values()
                 for test in track.tests
                 if not test.calls and any(name.endswith(".py") for name in (track.files if test.uses is None else test.uses))]  # fmt: skip
    assert not forgeable, forgeable


# ---- graded as the instructor does ----------------------------------------------------------------


def _require_sandbox() -> None:
    try:
        check_can_sandbox()
    except SandboxError as error:
        pytest.skip(str(error))


def _submission(tree: Path, answer: str, prelude: str = "") -> Path:
    make_skeleton(REPO_ROOT, tree, LAB, TRACK)
    [region] = [region for region in scan_file(tree, ANSWER_FILE) if region.lab == LAB.number]
    lines = [f"{region.indent}{line}" for line in textwrap.dedent(answer).strip("\n").splitlines()]
    (tree / ANSWER_FILE).write_text(fill_regions((tree / ANSWER_FILE).read_text(), {region: lines}) + prelude)
    return tree


@pytest.fixture(scope="module")
def fork(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A course's private fork: a hidden test (its file, its calls in lab.yaml), committed;
    then, not committed, a grades CSV, answer notes, a classmate's submission and a change
    to a committed file."""
    _require_sandbox()
    fork = tmp_path_factory.mktemp("course") / "fork"
    copy_tree(REPO_ROOT, fork)
    (fork / HIDDEN_FILE).write_text(f'"""{SECRET}"""\nfrom analysis.switchml import models\n\n\ndef {HIDDEN_NAME}():\n'
                                    f"    assert round(models.switchml_line_rate_ate(7e6, 32)) == {EXPECTED}\n")  # fmt: skip
    with (fork / "labs" / "00-run-and-measure" / "lab.yaml").open("a") as description:
        description.write(f'      - {{id: "{HIDDEN_FILE}::{HIDDEN_NAME}", points: 5, skeleton: fail, visibility: hidden,\n'
                          "         calls: [[analysis.switchml.models.switchml_line_rate_ate, 7.0e+6, 32]]}\n")  # fmt: skip
    git_checkout(fork)
    for name, text in PRIVATE.items():
        (fork / name).parent.mkdir(parents=True, exist_ok=True)
        (fork / name).write_text(text)
    with (fork / "labs" / "00-run-and-measure" / "README.md").open("a") as readme:
        readme.write(UNCOMMITTED)
    return fork


PUBLIC = sorted({sys.prefix, sys.base_prefix, *map(str, toolchain_folders(track_toolchain(TRACK)))})
"""What the sandbox binds at its own path for every student to read (the grader's Python,
its packages and the track's tools): under /tmp when the checkout is there (mktemp -d), and
no place for a secret, though a data file in them may hold any number."""

SNOOP = f"""
import os
found = []
for folder in ("/grade", "/tmp", "/run", "/dev/shm"):
    for root, folders, files in os.walk(folder):
        if any(root == public or root.startswith(public + "/") for public in {PUBLIC!r}):
            continue
        for name in files:
            path = os.path.join(root, name)
            if path.endswith("{ANSWER_FILE}"):  # this file
                continue
            try:
                text = open(path, errors="replace").read(1 << 20)
            except OSError:
                continue
            if "test_hidden" in name or any(word in text for word in {[SECRET, HIDDEN_NAME, EXPECTED, UNCOMMITTED, *PRIVATE.values()]!r}):
                found.append(path + ": " + text[:300])
raise NotImplementedError("found " + repr(found))
"""
"""An answer that looks for the hidden test, its expected value and the instructor's
private files everywhere the sandbox lets it, and sends what it finds back in its failure
messages."""


def test_no_hidden_test_and_no_private_file_reaches_the_sandbox_or_the_student(fork: Path, tmp_path: Path) -> None:
    tree = _submission(tmp_path / "snoop", SNOOP)
    report, results = tmp_path / "grade.json", tmp_path / "results.json"
    assert main(["grade", "0", "--tree", str(tree), "--tests-from", str(fork), "--report", str(report), "--gradescope", str(results)]) == 1
    graded = json.loads(report.read_text())
    assert graded["max_score"] == 15, "the hidden test is graded"
    messages = [test["message"] for test in graded["tests"] if test["visibility"] == "visible" and test["outcome"] != "pass"]
    assert messages and all("found []" in message for message in messages), messages
    seen = results.read_text()
    for word in [SECRET, HIDDEN_NAME, "test_hidden", EXPECTED, "7000000", UNCOMMITTED, *PRIVATE.values()]:
        assert word not in seen, f"{word} reached Gradescope's results.json"
    gradescope = json.loads(seen)
    assert gradescope["stdout_visibility"] == "hidden", "the grader's table names every test"
    assert [test["visibility"] for test in gradescope["tests"]] == ["visible"] * len(TRACK.tests) + ["hidden"]
    assert gradescope["tests"][-1]["name"] == f"hidden test {len(TRACK.tests) + 1}"


def test_a_correct_answer_gets_the_hidden_tests_points(fork: Path, tmp_path: Path) -> None:
    tree = _submission(tmp_path / "correct", CORRECT)
    report = tmp_path / "grade.json"
    assert main(["grade", "0", "--tree", str(tree), "--tests-from", str(fork), "--report", str(report)]) == 0
    assert json.loads(report.read_text())["score"] == 15


DEEP_AND_LARGE = """
import os
for folder in ("/grade/out", "/tmp"):
    try:
        with open(os.path.join(folder, "large"), "wb") as large:
            large.write(b"x" * (20 << 20))
        os.chdir(folder)
        for _ in range(5000):
            os.mkdir("d")
            os.chdir("d")
    except OSError:
        pass
os.chdir("/")
"""
"""Import-time lines that leave a 20 MB file and a tree 5000 folders deep wherever they may."""


def test_one_failing_submission_is_its_own_zero_and_the_class_is_graded(tmp_path: Path, monkeypatch, capsys) -> None:
    """Every input that stopped ``grade-batch`` before: a correct answer saved as UTF-16,
    a graded file that is a loop of links, a 400 KB arithmetic expression, a tree 5000
    folders deep with a 20 MB file beside it, a student id that is a terminal escape. Each
    is that submission's grade with a reason; the correct one after them keeps 10/10; each
    row is in the CSV; nothing is left in the grader's temporary folder."""
    _require_sandbox()
    submissions = tmp_path / "submissions"
    utf16 = _submission(submissions / "01-utf16", CORRECT)
    (utf16 / ANSWER_FILE).write_bytes((utf16 / ANSWER_FILE).read_text().encode("utf-16"))
    loop = _submission(submissions / "02-loop", CORRECT)
    (loop / ANSWER_FILE).unlink()
    (loop / ANSWER_FILE).symlink_to(loop / "methods" / "other.py")
    (loop / "methods" / "other.py").symlink_to(loop / ANSWER_FILE)
    _submission(submissions / "03-expression", "return " + "+".join(["1"] * 200_000))
    _submission(submissions / "04-deep", CORRECT, DEEP_AND_LARGE)
    _submission(submissions / "05-\x1b]0;owned\x07\x1b[2J", "raise NotImplementedError('\\x1b[32m12/12')")
    _submission(submissions / "06-correct", CORRECT)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    grades = tmp_path / "grades.csv"
    assert main(["grade-batch", "0", str(submissions), "--csv", str(grades), "--tests-from", str(REPO_ROOT), "--cap-s", "60",
                 "--lms", "canvas", "--lms", "moodle"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    assert "\x1b" not in printed, "a student's id reached the terminal raw"
    rows = {row["student"]: row for row in csv.DictReader(grades.open())}
    assert len(rows) == 6 and rows["06-correct"]["score"] == "10", rows
    assert rows["01-utf16"]["problem"].startswith(f"{ANSWER_FILE}: source code string cannot contain null bytes"), rows["01-utf16"]
    assert "symbolic link" in rows["02-loop"]["problem"]
    assert "too deeply nested or too long" in rows["03-expression"]["problem"] or int(rows["03-expression"]["score"]) <= 1
    assert all(int(row["score"]) <= 1 for name, row in rows.items() if name not in ("04-deep", "06-correct")), rows
    assert not list(scratch.iterdir()), f"left behind: {[path.name for path in scratch.iterdir()]}"
    escaping = next((tmp_path / "grades").glob("05-*.json")).read_text()
    assert "\x1b" not in json.loads(escaping)["tests"][0]["message"] and "\\x1b[32m12/12" in escaping
    canvas = list(csv.reader((tmp_path / "grades-canvas.csv").open()))
    assert canvas[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab 0"] and len(canvas) == 7
    moodle = list(csv.DictReader((tmp_path / "grades-moodle.csv").open()))
    assert {row["Username"]: row["Lab 0"] for row in moodle}["06-correct"] == "10"


def test_a_crash_of_the_grader_on_one_submission_is_its_zero_with_the_reason(tmp_path: Path, monkeypatch) -> None:
    """Whatever goes wrong in grading one submission, the grader's own fault included."""
    _require_sandbox()
    submissions = tmp_path / "submissions"
    _submission(submissions / "a-breaks-the-grader", CORRECT)
    _submission(submissions / "b-correct", CORRECT)
    import labs.grade

    real = labs.grade.place_submission

    def failing(base: Path, submission: Path, track: catalog.Track, tree: Path) -> str | None:
        if submission.name.startswith("a-"):
            raise RecursionError("maximum recursion depth exceeded")
        return real(base, submission, track, tree)

    monkeypatch.setattr("labs.__main__.place_submission", failing)
    grades = tmp_path / "grades.csv"
    assert main(["grade-batch", "0", str(submissions), "--csv", str(grades), "--tests-from", str(REPO_ROOT)]) == 0
    rows = {row["student"]: row for row in csv.DictReader(grades.open())}
    assert rows["a-breaks-the-grader"]["score"] == "0"
    assert rows["a-breaks-the-grader"]["problem"] == "the grader could not grade this submission: RecursionError: maximum recursion depth exceeded"
    assert rows["b-correct"]["score"] == "10"
    assert math.isfinite(float(rows["b-correct"]["seconds"]))
    assert os.path.isfile(tmp_path / "grades" / "a-breaks-the-grader.json")


def test_the_gradescope_bundle_grades_a_submission_as_gradescope_runs_it(fork: Path, tmp_path: Path) -> None:
    """The zip a course uploads, unpacked where Gradescope unpacks it (here under a folder
    standing for /autograder), made a checkout as its setup.sh does, and its
    run_autograder's command run on a submission of the graded file alone (a drag and
    drop upload): results.json holds the grade, the hidden test hidden; the zip holds the
    fork's last commit and nothing the instructor did not commit."""
    import shlex
    import subprocess
    import zipfile

    autograder = tmp_path / "autograder"
    assert main(["gradescope", "0", "--out", str(tmp_path / "lab0.zip"), "--tests-from", str(fork)]) == 0
    with zipfile.ZipFile(tmp_path / "lab0.zip") as bundle:
        names = bundle.namelist()
        assert {"setup.sh", "run_autograder", HIDDEN_FILE} <= set(names)
        assert not set(PRIVATE) & set(names)
        assert all(bundle.getinfo(script).external_attr >> 16 & 0o111 for script in ("setup.sh", "run_autograder"))
        bundle.extractall(autograder / "source")
    source = autograder / "source"
    assert UNCOMMITTED not in (source / "labs" / "00-run-and-measure" / "README.md").read_text()
    setup = (source / "setup.sh").read_text()
    assert "git init" in setup and "./scripts/bootstrap.sh" in setup
    git_checkout(source)
    (source / ".venv").symlink_to(REPO_ROOT / ".venv")  # what bootstrap.sh makes
    (autograder / "submission").mkdir()
    (autograder / "submission" / "switchml.py").write_text((_submission(tmp_path / "student", CORRECT) / ANSWER_FILE).read_text())
    script = (source / "run_autograder").read_text().replace("/autograder", str(autograder))
    command = shlex.split(next(line for line in script.replace("\\\n", " ").splitlines() if line.startswith(".venv/bin/python")))
    done = subprocess.run(command, cwd=source, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((autograder / "results" / "results.json").read_text())
    assert results["score"] == 15 and results["tests"][-1]["visibility"] == "hidden"


def test_lab_3s_lossy_runs_are_decided_by_the_grader_and_a_pytest_verdict_only_without_the_submissions_python(tmp_path: Path) -> None:
    """Lab 3 graded as an instructor does, on a submission whose timers.py registers the
    pass-everything hook at import: its lossy all-reduce and its end-to-end run are
    decided by the grader from the simulated lossy run's sends and events, which the
    hook cannot touch (they fail: the timers are the handout's stubs); the test that uses
    none of the submission's files (lab.yaml's ``uses: []``) runs in a session with the
    handout's files only, so pytest's verdict there is of record; no point is flagged."""
    _require_sandbox()
    from dataclasses import replace

    from labs.grade import clean_tree, expected_outputs, grade, limits, place_submission, reference_tree, score_table
    from tests.test_lab_grader import GC_HOOK

    lab = catalog.by_number(3)
    track = lab.track("python")
    picked = tuple(test for test in track.tests if any(name in test.id for name in ("udp_checksum_zero", "loss_is_recovered", "e2e")))
    track = replace(track, tests=picked)
    caps = limits(lab, track, 300)
    base = clean_tree(REPO_ROOT, lab, track, tmp_path / "clean")
    expected = expected_outputs(lab, track, reference_tree(REPO_ROOT, base, track, tmp_path / "reference"), caps)
    submission = tmp_path / "student"
    make_skeleton(REPO_ROOT, submission, lab, track)
    with (submission / "hosts" / "switchml" / "timers.py").open("a") as timers:
        timers.write(GC_HOOK)
    tree = tmp_path / "graded"
    problem = place_submission(base, submission, track, tree)
    result = grade(lab, track, tree, caps, problem, expected, base)
    verdicts = {test.id.split("::")[1]: (test.verdict, test.outcome == "pass") for test in result.tests}
    assert verdicts == {"test_loss_is_recovered_exactly[python-float32]": ("grader", False),
                        "test_one_percent_loss_verifies_bit_for_bit": ("grader", False),
                        "test_socket_sends_udp_checksum_zero[python]": ("sandbox", True)}, score_table(lab, result)  # fmt: skip
    assert result.score == 1 and "note:" not in score_table(lab, result), score_table(lab, result)


def test_a_reference_whose_code_cannot_be_imported_stops_the_grade_instead_of_passing_everyone(monkeypatch) -> None:
    """An output is compared by its exception's type, so a reference that raises ImportError
    (a function moved, its import not) would credit every submission that raises it too:
    such a reference is the lab's error, said before any submission is graded."""
    from labs import grade
    from labs.sandbox import Limits, Outcome

    lab = catalog.by_number(3)
    track = lab.tracks["python"]
    calls = record.numbered(test for test in track.tests if test.calls)
    broken = {id_: {"raises": "ImportError", "message": "cannot import name 'retransmit_policy'"} for id_, _, _ in calls}
    monkeypatch.setattr(record, "compute", lambda *args: record.Computed(broken, Outcome(0, "", False)))
    with pytest.raises(catalog.ConfigError, match="the reference raises ImportError .* the lab's code is broken"):
        grade.expected_outputs(lab, track, REPO_ROOT, Limits(60, 1 << 30, 64))
    assert not record.raised_as_broken({"raises": "ValueError", "message": ""})
