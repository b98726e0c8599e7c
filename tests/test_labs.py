"""The labs (labs/): descriptions, markers, skeletons and grader, and every lab both ways.

For every lab and track the reference (this checkout: the reference solution is the
project's own code) gets full marks, and the skeleton fails exactly the tests its lab.yaml
says it fails and passes all the others. A skeleton that passed a test it should fail
would mean the stub did not take (the graded tree's code was not what ran); one that
failed a test it should pass would mean a stub broke more than its lab.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text

from analysis.switchml import models as switchml_models
from analysis.context import EmulationContext
from base.yamlschema import load_schema, load_yaml, validate
from hosts.switchml.native import STANDS_IN_FOR
from labs import catalog
from labs.__main__ import main
from labs import grade as grading
from labs.grade import grade, junit_key, readable, score_table
from labs.markers import MarkerError, marked_files, scan_file, scan_text
from labs.figures import pool_model_figure
from labs.plot import known_figures
from labs.skeleton import INSTRUCTOR_ONLY, copy_tree, fill_regions, make_skeleton, stub_text, tracked_files
from protocol.switchml import params
from protocol.switchml.packet import frame_bytes
from protocol.params import REPO_ROOT, mbps_to_bps
from switches.bmv2.compile import CompileOptions
from switches.bmv2.switchml.program import PROGRAM
from tests.conftest import IN_SANDBOX_GROUP, require_target, require_track_machine

LABS = catalog.all_labs()
TRACK_CASES = [
    pytest.param(lab, track, id=f"lab{lab.number}-{track.name}", marks=[getattr(pytest.mark, need) for need in track.needs])
    for lab in LABS
    for track in lab.tracks.values()
]


# ---- descriptions and markers -----------------------------------------------------------


def test_labs_are_numbered_from_zero_without_gaps() -> None:
    assert [lab.number for lab in LABS] == list(range(len(LABS)))
    assert all(lab.folder.name.startswith(f"{lab.number:02d}-") for lab in LABS)
    assert all((lab.folder / "README.md").is_file() for lab in LABS)


def test_every_marked_region_belongs_to_a_lab_track_that_lists_its_file() -> None:
    regions = marked_files(REPO_ROOT, tracked_files(REPO_ROOT))
    marked = {(region.lab, path) for path, found in regions.items() for region in found}
    listed = {(lab.number, path) for lab in LABS for track in lab.tracks.values() for path in track.files}
    assert marked == listed


def test_graded_tests_exist_and_figures_are_known() -> None:
    """Every graded node id collects (a renamed test would otherwise only show as 'not run')."""
    for lab in LABS:
        assert set(lab.figures) <= known_figures(), lab.name
        for track in lab.tracks.values():
            ids = [test.id for test in track.tests]
            assert len(ids) == len(set(ids)), f"{lab.name} {track.name}: a test is listed twice"
            assert any(test.skeleton == "fail" for test in track.tests)
    ids = sorted({test.id for lab in LABS for track in lab.tracks.values() for test in track.tests})
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *ids],
                               capture_output=True, text=True, cwd=REPO_ROOT)  # fmt: skip
    assert collected.returncode == 0, f"a graded test id does not exist: {collected.stdout[-2000:]}{collected.stderr[-2000:]}"


LAB_TEXTS = [catalog.LABS_DIR / "README.md", *(lab.folder / "README.md" for lab in LABS)]
CITED_LINE = re.compile(r"\.(?:py|p4):\d+|\bline \d+")
CITED_TIME = re.compile(r"\b\d+(?:\.\d+)? ?(?:s|min|minutes?|h)\b(?! \()|\b(?:a|one|two) (?:minute|hour)s?\b|about (?:a|one|two) ")


@pytest.mark.parametrize("text", LAB_TEXTS, ids=lambda path: path.parent.name)
def test_lab_texts_cite_no_line_numbers_or_run_times(text: Path) -> None:
    """Line numbers move with every edit and run times with every machine: a lab text that
    cites them goes stale unnoticed (the skeleton command prints the lines; a run prints
    its time). The times a text may give are checked: a lab's hours are lab.yaml's, the
grader's default timeout is its own; the series table is checked below."""
    content = text.read_text()
    checked = [f"{catalog.DEFAULT_TIMEOUT_S:g} s unless lab.yaml says otherwise"]  # the grader's default, cited as it is
    checked += [f"**Time:** {lab.hours}." for lab in LABS if lab.folder == text.parent]  # lab.yaml's hours
    assert all(citation in content for citation in checked[1:]), f"{text}: its time is not lab.yaml's {checked[1:]}"
    run_time = re.search(r"The run takes (about [^(]+?) \(its config's description says so\)", content)
    if run_time:  # a run's time, as its config's description gives it
        lab = next(lab for lab in LABS if lab.folder == text.parent)
        config = REPO_ROOT / re.search(r"configs/labs/\S+\.yaml", lab.run or "")[0]
        assert run_time[1] in load_yaml(config)["description"], f"{text}: the run takes {run_time[1]}, not what {config.name} says"
        checked.append(run_time[0])
    for citation in checked:
        content = content.replace(citation, "")
    lines = content.splitlines()
    cited = [f"{number}: {line.strip()}" for number, line in enumerate(lines, 1)
             if CITED_LINE.search(line) or (CITED_TIME.search(line) and not line.startswith("| ["))]  # fmt: skip
    assert not cited, "\n".join(cited)


def test_the_series_table_gives_each_labs_hours_and_points() -> None:
    rows = {int(row.split("](")[0].removeprefix("| [")): row for row in (catalog.LABS_DIR / "README.md").read_text().splitlines()
            if row.startswith("| [")}  # fmt: skip
    for lab in LABS:
        points = ", ".join(f"{track.name} {track.points}" for track in lab.tracks.values())
        assert f"| {lab.hours} | {points} |" in rows[lab.number], rows[lab.number]


def test_the_guide_says_what_each_default_handout_holds() -> None:
    rows = {row.split("|")[1].strip(): row for row in (catalog.LABS_DIR / "README.md").read_text().splitlines()
            if row.startswith("| ") and row.split("|")[1].strip().isdigit()}  # fmt: skip
    for lab in LABS:
        row = rows[str(lab.number)]
        earlier = ("none" if lab.number == 0 else "lab 0" if lab.number == 1 else "labs " + ", ".join(map(str, range(lab.number))))
        assert row.split("|")[2].strip() == earlier, f"holds the answers of {earlier}: {row}"


def test_lab_2_gives_the_p4c_command_the_grader_runs() -> None:
    """A student reading a compile error runs p4c by hand with the include path the build uses
    (at the labs' k, params.P4_SOURCE_K, p4/switchml/include holds the generated per-element code the build
    writes into its own include directory: test_p4_contract.py checks they are the same)."""
    output = Path("build/p4-by-hand")
    options = CompileOptions(program=PROGRAM, k=params.P4_SOURCE_K, max_pool_size=params.MAX_POOL_SIZE)
    command = options.command(output)
    generated = command.index(str(output / "include"))
    command = command[: generated - 1] + command[generated + 1 :]
    by_hand = [part.replace(f"{REPO_ROOT}/", "") for part in command if part not in options.defines()]
    assert " ".join(by_hand) in (LABS[2].folder / "README.md").read_text()


def test_lab_configs_validate() -> None:
    for config in sorted((REPO_ROOT / "configs" / "labs").glob("*.yaml")):
        run = subprocess.run([sys.executable, str(REPO_ROOT / "run_experiment.py"), str(config), "--dry-run"],
                             capture_output=True, text=True, cwd=REPO_ROOT)  # fmt: skip
        assert run.returncode == 0, f"{config.name}: {run.stderr}"


def test_a_lab_that_has_the_worker_written_runs_the_python_worker() -> None:
    """The native data path does in C what hosts/switchml/native.STANDS_IN_FOR does in
    Python: a lab whose student writes part of those files must run the Python worker, or
    the run would not be the student's code; every other lab runs what ``auto`` picks."""
    for lab in LABS:
        writes_the_worker = any(path in STANDS_IN_FOR for track in lab.tracks.values() for path in track.files)
        for config in sorted((REPO_ROOT / "configs" / "labs").glob(f"lab{lab.number}-*.yaml")):
            data_path = (load_yaml(config).get("protocol") or {}).get("data_path", "auto")
            assert (data_path == "python") == writes_the_worker, f"{config.name}: protocol.data_path {data_path}"


def test_a_bad_description_names_file_and_key(tmp_path: Path) -> None:
    folder = tmp_path / "09-bad"
    folder.mkdir()
    (folder / "lab.yaml").write_text("number: 9\ntitle: x\nhours: 1 h\nplot: {figures: [x], about: y}\ntracks: {python: {files: [a.py], tests: [{id: a.py, points: 1, skeleton: fail}]}}\n")
    with pytest.raises(catalog.ConfigError, match=r"lab.yaml: tracks.python.tests\[0\].id: 'a.py' does not match"):
        catalog.all_labs(tmp_path)


@pytest.mark.parametrize(("text", "problem"), [
    ("# BEGIN LAB 1: x\n# BEGIN LAB 2: y\n# END LAB 2\n", "f.py:2: BEGIN LAB 2 inside BEGIN LAB 1 of line 1"),
    ("x = 1\n# END LAB 1\n", "f.py:2: END LAB 1 without a BEGIN LAB 1"),
    ("# BEGIN LAB 1: x\ny = 2\n", "f.py:1: BEGIN LAB 1 is never ended"),
    ("# BEGIN LAB 1: x\n# END LAB 1\n", "f.py:2: LAB 1 region is empty"),
    ("# BEGIN LAB 1\nx = 1\n# END LAB 1\n", "f.py:1: BEGIN LAB 1 needs a hint"),
])  # fmt: skip
def test_markers_that_do_not_pair_up_are_named(text: str, problem: str) -> None:
    with pytest.raises(MarkerError, match=problem.replace("(", r"\(")):
        scan_text(text, "f.py")


def test_stubs_keep_the_markers_and_the_indentation() -> None:
    python = "def f(x):\n    y = 1\n    # BEGIN LAB 3: return twice x\n    z = 2 * x\n    return z\n    # END LAB 3\n"
    assert stub_text(python, scan_text(python, "f.py"), ".py") == (
        "def f(x):\n    y = 1\n    # BEGIN LAB 3: return twice x\n"
        "    raise NotImplementedError('Lab 3: return twice x')\n    # END LAB 3\n"
    )
    p4 = "        } else {\n            // BEGIN LAB 2: add\n            add_values();\n            // END LAB 2\n"
    assert stub_text(p4, scan_text(p4, "f.p4"), ".p4") == (
        "        } else {\n            // BEGIN LAB 2: add\n            // Lab 2: add\n"
        "            mark_to_drop(standard_metadata);\n            // END LAB 2\n"
    )


def test_a_failures_line_loses_pytests_padding_not_what_went_wrong() -> None:
    compile_error = 'failed on setup with "switches.bmv2.compile.P4CompileError: p4c: p4/switchml/include/ingress.p4(345):syntax error'
    assert readable(compile_error) == "setup: P4CompileError: p4c: p4/switchml/include/ingress.p4(345):syntax error"
    assert readable("AssertionError: host 0 got 0 results: []") == "AssertionError: host 0 got 0 results: []"


def test_junit_names_of_node_ids() -> None:
    assert junit_key("tests/test_a.py::test_b[embedded-k32]") == ("tests.test_a", "test_b[embedded-k32]")
    assert junit_key("labs/02-x/tests/test_c.py::TestD::test_e") == ("labs.02-x.tests.test_c.TestD", "test_e")


# ---- every lab both ways ----------------------------------------------------------------


GRADING_TIMEOUT_S = 1200
"""A grader run holds the lab's whole pytest session; lab 3's waits for the network lock too."""


@pytest.mark.timeout(GRADING_TIMEOUT_S)
@pytest.mark.parametrize(("lab", "track"), TRACK_CASES)
def test_reference_gets_full_marks(lab: catalog.Lab, track: catalog.Track) -> None:
    require_track_machine(track.needs)
    result = grade(lab, track, REPO_ROOT)
    assert result.full_marks, score_table(lab, result)


@pytest.mark.timeout(GRADING_TIMEOUT_S)
@pytest.mark.parametrize(("lab", "track"), TRACK_CASES)
def test_skeleton_fails_exactly_its_expected_tests(lab: catalog.Lab, track: catalog.Track, tmp_path: Path) -> None:
    require_track_machine(track.needs)
    tree = tmp_path / "tree"
    make_skeleton(REPO_ROOT, tree, lab, track)
    result = grade(lab, track, tree)
    passed = {test.id: test.outcome == "pass" for test in result.tests}
    assert passed == {test.id: test.skeleton == "pass" for test in track.tests}, score_table(lab, result)
    assert result.score < result.max_score


@pytest.mark.bmv2
@pytest.mark.parametrize("lab", [lab for lab in LABS if "p4" in lab.tracks], ids=lambda lab: f"lab{lab.number}")
def test_p4_skeleton_compiles(lab: catalog.Lab, tmp_path: Path) -> None:
    require_target("bmv2")
    tree = tmp_path / "tree"
    make_skeleton(REPO_ROOT, tree, lab, lab.tracks["p4"])
    assert "mark_to_drop(standard_metadata);" in (tree / "p4" / "switchml" / "include" / "ingress.p4").read_text()
    compiled = subprocess.run(
        [sys.executable, "-c", "from switches.bmv2.compile import CompileOptions, compile_p4; from switches.bmv2.switchml.program import PROGRAM; "
                         "from protocol.switchml import params; "
                         "print(compile_p4(CompileOptions(program=PROGRAM, k=params.P4_SOURCE_K, max_pool_size=params.MAX_POOL_SIZE)))"],
        cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    assert Path(compiled.stdout.strip()).is_relative_to(tree), "compiled the skeleton's program, not the checkout's"


# ---- handouts ----------------------------------------------------------------------------


def _region_bodies(root: Path) -> dict[tuple[str, int, int], list[str]]:
    """Per (file, lab, ordinal of the lab's regions in that file): the region's lines."""
    bodies = {}
    for path, regions in marked_files(root, tracked_files(root)).items():
        lines = (root / path).read_text().splitlines()
        for region in regions:
            ordinal = sum(1 for key in bodies if key[:2] == (path, region.lab))
            bodies[(path, region.lab, ordinal)] = lines[region.begin + 1 : region.end]
    return bodies


def _assert_holds_only(tree: Path, held: Callable[[int, str], bool]) -> None:
    """Every region of ``tree`` is the reference's where ``held(lab, path)``, a stub elsewhere."""
    reference, handout = _region_bodies(REPO_ROOT), _region_bodies(tree)
    assert handout.keys() == reference.keys(), "a handout keeps every region's markers"
    for (path, lab, ordinal), body in handout.items():
        answer = reference[(path, lab, ordinal)]
        if held(lab, path):
            assert body == answer, f"{path}: lab {lab}'s region {ordinal} is not the reference"
        else:
            assert body != answer and len(body) <= 2, f"{path}: holds lab {lab}'s answer (region {ordinal})"
    assert not any((tree / path).exists() for path in INSTRUCTOR_ONLY), "a handout holds the instructor's solutions"


@pytest.mark.parametrize(("lab", "track"), [(lab, track) for lab, track in (case.values for case in TRACK_CASES)],
                         ids=[case.id for case in TRACK_CASES])  # fmt: skip
def test_a_handout_holds_only_the_answers_its_lab_keeps(lab: catalog.Lab, track: catalog.Track, tmp_path: Path) -> None:
    """By default a lab's handout holds earlier labs' answers, none of its own (in either
    track's files) and no later lab's."""
    make_skeleton(REPO_ROOT, tmp_path / "tree", lab, track)
    _assert_holds_only(tmp_path / "tree", lambda n, path: n < lab.number)


@pytest.mark.parametrize(("lab", "track"), [(lab, track) for lab, track in (case.values for case in TRACK_CASES)],
                         ids=[case.id for case in TRACK_CASES])  # fmt: skip
def test_no_handout_holds_a_later_labs_region(lab: catalog.Lab, track: catalog.Track, tmp_path: Path) -> None:
    """Lab 0's handout held lab 1's whole quantization and labs 0-2 lab 3's timers: every
    region of a later lab, in every file of the handout, is now a stub (the reference's
    text of the region appears nowhere in the handout either)."""
    make_skeleton(REPO_ROOT, tmp_path / "tree", lab, track)
    reference, handout = _region_bodies(REPO_ROOT), _region_bodies(tmp_path / "tree")
    later = {key: body for key, body in reference.items() if key[1] > lab.number}
    assert later or lab.number == len(LABS) - 1, "the regions of the later labs"
    held = [f"{path}: lab {n}'s region {ordinal}" for (path, n, ordinal), body in later.items() if handout[(path, n, ordinal)] == body]
    assert not held, f"lab {lab.number}'s handout holds {held}"
    for (path, n, ordinal), body in later.items():
        text = (tmp_path / "tree" / path).read_text()
        assert "\n".join(body) not in text, f"{path}: lab {n}'s answer (region {ordinal}) is in the file outside its markers"


def test_lab0s_run_verifies_in_its_handout_without_lab_1s_quantization(tmp_path: Path) -> None:
    """Lab 0's handout held lab 1's answer because its run quantized floats and its check
    computed the exact SwitchML sum with them. The run all-reduces int32s now: simulated (the
    simulator's switch is the embedded one, so lab 2's aggregation is kept; lab 1's
    quantization and lab 3's timers are stubs), with the bound written in, it verifies."""
    tree = tmp_path / "lab0"
    lab = catalog.by_number(0)
    make_skeleton(REPO_ROOT, tree, lab, lab.track(None), keep=frozenset({2}))
    assert "raise NotImplementedError('Lab 1: " in (tree / "protocol" / "quantize.py").read_text()
    bound = "methods/switchml.py"
    [region] = [region for region in scan_file(tree, bound) if region.lab == 0]
    (tree / bound).write_text(fill_regions((tree / bound).read_text(), {region: [f"{region.indent}return k * link_bps / (8 * frame_bytes(k))"]}))
    done = subprocess.run([sys.executable, "run_experiment.py", "configs/labs/lab0-workers.yaml", "--simulate", "--out", str(tmp_path / "run"),
                           "--set", "sweep.values=[2, 8]"], cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)},
                          capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "verified: true" in done.stdout, done.stdout[-3000:]


@pytest.mark.parametrize("lab", LABS, ids=lambda lab: f"lab{lab.number}")
def test_an_instructor_hands_out_a_lab_with_no_other_labs_answer(lab: catalog.Lab, tmp_path: Path, caplog) -> None:
    """``--keep none`` for every lab: the handout holds no other lab's answer (in any track's
    files), and the command warns, naming them, when that stubs earlier labs' answers."""
    assert main(["skeleton", str(lab.number), "--keep", "none", "--out", str(tmp_path / "none")]) == 0
    _assert_holds_only(tmp_path / "none", lambda n, path: False)
    earlier = [f"lab {region.lab}'s {path}" for path, regions in marked_files(REPO_ROOT, tracked_files(REPO_ROOT)).items()
               for region in regions if region.lab < lab.number]  # fmt: skip
    assert all(name in caplog.text for name in earlier) and (("stubs the earlier" in caplog.text) == bool(earlier)), caplog.text


def test_an_instructor_chooses_which_answers_a_handout_keeps(tmp_path: Path) -> None:
    lab = catalog.by_number(2)
    assert main(["skeleton", "2", "--keep", "0,4", "--out", str(tmp_path / "some")]) == 0
    _assert_holds_only(tmp_path / "some", lambda n, path: n in {0, 4})
    assert main(["skeleton", "2", "--keep", "2", "--out", str(tmp_path / "own")]) == 2, "never its own answer"
    assert lab.keeps_by_default(1) and not lab.keeps_by_default(3)


# ---- the command line -------------------------------------------------------------------


def test_skeleton_command_makes_a_repository_of_its_own(tmp_path: Path, capsys) -> None:
    out = tmp_path / "lab0"
    assert main(["skeleton", "0", "--out", str(out)]) == 0
    assert "methods/switchml.py:" in capsys.readouterr().out
    status = subprocess.run(["git", "-C", str(out), "status", "--porcelain"], capture_output=True, text=True, check=True)
    assert status.stdout == "", "the skeleton is committed, nothing else is in it"
    assert main(["skeleton", "0", "--out", str(out)]) == 2, "refuses a folder that is not empty"


def git_checkout(folder: Path) -> Path:
    """``folder`` made a git checkout of one commit, as a course's private fork is (the clean
    tree a grade builds is made from what git tracks there)."""
    git = ["git", "-C", str(folder), "-c", "user.name=ta", "-c", "user.email=ta@localhost"]
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the course's fork"]):
        subprocess.run([*git, *command], check=True, capture_output=True)
    return folder


@pytest.mark.netns  # an instructor's grade runs each submission in the sandbox: root only
@IN_SANDBOX_GROUP
def test_grade_batch_grades_each_submission_with_the_instructors_tests(tmp_path: Path) -> None:
    lab = catalog.by_number(0)
    submissions = tmp_path / "submissions"
    make_skeleton(REPO_ROOT, submissions / "alice", lab, lab.track(None))
    copy_tree(REPO_ROOT, submissions / "bob")
    shutil.rmtree(submissions / "alice" / "labs" / "00-run-and-measure" / "tests")  # a student cannot drop the tests
    grades = tmp_path / "grades.csv"
    assert main(["grade-batch", "0", str(submissions), "--csv", str(grades)]) == 0
    rows = {row["student"]: row for row in csv.DictReader(grades.open())}
    assert (rows["alice"]["score"], rows["bob"]["score"]) == ("1", "10")
    assert rows["bob"]["max"] == "10"
    report = json.loads((tmp_path / "grades" / "alice.json").read_text())
    assert report["tree"] == str(submissions / "alice") and not report["full_marks"]
    assert report["student"] == "alice", "the batch records each student's id"


@pytest.mark.netns
def test_hidden_tests_of_a_private_fork_are_graded(tmp_path: Path) -> None:
    fork = tmp_path / "fork"
    copy_tree(REPO_ROOT, fork)
    hidden = "labs/00-run-and-measure/tests/test_hidden.py"
    (fork / hidden).write_text(
        "from analysis.switchml import models\n\n\ndef test_bound_at_ten_megabits():\n"
        "    assert round(models.switchml_line_rate_ate(10e6, 32)) == 218579\n"
    )
    with (fork / "labs" / "00-run-and-measure" / "lab.yaml").open("a") as description:
        description.write(f'      - {{id: "{hidden}::test_bound_at_ten_megabits", points: 5, skeleton: fail, visibility: hidden,\n'
                          "         calls: [[analysis.switchml.models.switchml_line_rate_ate, 10.0e+6, 32]]}\n")
    git_checkout(fork)
    report = tmp_path / "grade.json"
    assert main(["grade", "0", "--tree", str(REPO_ROOT), "--tests-from", str(fork), "--report", str(report)]) == 0
    graded = json.loads(report.read_text())
    assert graded["max_score"] == 15 and graded["full_marks"]
    assert f"{hidden}::test_bound_at_ten_megabits" in [test["id"] for test in graded["tests"]]
    assert not (REPO_ROOT / hidden).exists(), "the tree graded is a copy"


@pytest.mark.netns
def test_a_ta_grades_the_folder_they_are_in(tmp_path: Path, monkeypatch) -> None:
    """``--tree .`` with ``--tests-from``: the copy graded is named for the submission, not
    for '.' (whose name is empty: the copy was the scratch folder itself, FileExistsError)."""
    copy_tree(REPO_ROOT, tmp_path / "student")
    monkeypatch.chdir(tmp_path / "student")
    report = tmp_path / "grade.json"
    assert main(["grade", "0", "--tree", ".", "--tests-from", str(REPO_ROOT), "--report", str(report)]) == 0
    graded = json.loads(report.read_text())
    assert graded["full_marks"] and graded["tree"] == str(tmp_path / "student")


def test_a_syntax_error_in_the_students_file_is_the_reports_first_line(tmp_path: Path, capsys) -> None:
    """Every test showed 'not run: found no collectors for ...', and the error itself nowhere."""
    lab = catalog.by_number(0)
    tree = tmp_path / "student"
    make_skeleton(REPO_ROOT, tree, lab, lab.track(None))
    path = tree / "methods" / "switchml.py"
    lines = path.read_text().splitlines()
    broken = next(i for i, line in enumerate(lines) if line.strip().startswith("def ")) + 1
    lines.insert(broken, "    return (")
    path.write_text("\n".join(lines) + "\n")
    report, gradescope = tmp_path / "grade.json", tmp_path / "autograder" / "results.json"
    assert main(["grade", "0", "--tree", str(tree), "--report", str(report), "--gradescope", str(gradescope)]) == 1
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"your code does not run: methods/switchml.py:{broken + 1}: SyntaxError: "), first
    graded = json.loads(report.read_text())
    assert next(iter(graded)) == "problem" and graded["problem"] == first.removeprefix("your code does not run: ")
    # Gradescope's results.json: one entry per graded test, scores that add up, the problem first in its output
    results = json.loads(gradescope.read_text())
    track = lab.track(None)
    assert [t["name"] for t in results["tests"]] == [test.id for test in track.tests]
    assert sum(t["max_score"] for t in results["tests"]) == track.points and results["score"] == sum(t["score"] for t in results["tests"])
    assert results["output"].startswith(first) and all(t["visibility"] == "visible" for t in results["tests"])


@pytest.mark.parametrize(("lab", "track"), [(lab, track) for lab, track in (case.values for case in TRACK_CASES)],
                         ids=[case.id for case in TRACK_CASES])  # fmt: skip
def test_the_reference_has_no_syntax_problem_in_any_track(lab: catalog.Lab, track: catalog.Track) -> None:
    """Every p4 track's grade began 'your code does not run: p4/switchml/include/ingress.p4:6:
    SyntaxError': the P4 file was compiled as Python."""
    assert grading.syntax_problem(REPO_ROOT, track.files) is None


def test_gradescope_results_hold_only_the_fields_gradescope_documents() -> None:
    """results.json against labs/gradescope.schema.yaml (Gradescope's specification): a
    misspelt or unknown key would be ignored by Gradescope, and the test with it."""
    lab = catalog.by_number(0)
    track = lab.track(None)
    tests = [grading.TestResult(test.id, test.points, test.points * (i % 2), "pass" if i % 2 else "fail", "" if i % 2 else "AssertionError: x", 0.1)
             for i, test in enumerate(track.tests)]  # fmt: skip
    graded = grading.Grade(0, "python", "tree", sum(t.earned for t in tests), track.points, 1.5, tests, 1, "methods/switchml.py:3: SyntaxError: x")
    results = grading.gradescope_results(lab, graded)
    validate(results, load_schema(catalog.LABS_DIR / "gradescope.schema.yaml"), "results.json")
    assert [(t["score"], t["max_score"], t["status"]) for t in results["tests"]] == [
        (t.earned, t.points, "passed" if t.outcome == "pass" else "failed") for t in tests]
    assert results["score"] == graded.score and results["tests"][0]["output"] == "fail: AssertionError: x"
    with pytest.raises(catalog.ConfigError, match="results.json: tests"):
        validate({"tests": [{**results["tests"][0], "max_points": 3}]}, load_schema(catalog.LABS_DIR / "gradescope.schema.yaml"),
                 "results.json")  # fmt: skip


def test_a_handout_run_names_the_function_still_to_write_in_one_line(tmp_path: Path) -> None:
    """Lab 0's step 1 in the student's tree ended in a raw NotImplementedError traceback (the
    config's check calls the stubbed bound)."""
    lab = catalog.by_number(0)
    tree = tmp_path / "student"
    make_skeleton(REPO_ROOT, tree, lab, lab.track(None))
    done = subprocess.run([sys.executable, "run_experiment.py", "configs/labs/lab0-workers.yaml", "--dry-run", "--switch", "embedded"],
                          cwd=tree, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 5, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert re.search(r"ERROR methods/switchml\.py:\d+: line_rate_ate\(\) is still to be written \(Lab 0: .*\); this tree is a lab "
                     r"handout: write it, then run again \(labs/README\.md\)$", line), line


def test_lab0s_walk_through_quotes_the_table_it_walks_through() -> None:
    """The walk-through's SwitchML ATE/s (51.6k / 50.5k / 50.2k) differed from the step 1
    table printed above it (51.5k / 51.3k / 50.8k)."""
    text = (catalog.by_number(0).folder / "README.md").read_text()
    table = [float(ate) for ate in re.findall(r"^\s+switchml\s+\S+\s+(\S+)", text, re.MULTILINE)]
    quoted = re.search(r"SwitchML line stayed flat on the dashed bound \(([\d.]+)k, ([\d.]+)k, ([\d.]+)k ATE/s", text)
    assert table and quoted, "the walk-through's table and sentence"
    assert [float(q) for q in quoted.groups()] == [round(ate / 1000, 1) for ate in table]


def test_lab4s_sweep_samples_around_the_knee_its_question_asks_about() -> None:
    """The knee (~37 slots) fell between the samples 32 and 64: the sweep holds it, and a
    pool just below and just above it."""
    config = load_yaml(REPO_ROOT / "configs" / "labs" / "lab4-pool.yaml")
    link, k = config["topology"]["link"], config["protocol"]["k"]
    link_bps = mbps_to_bps(link["bw_mbps"])
    round_trip_s = switchml_models.slot_round_trip_s(link_bps, k, link["delay_ms"] / 1e3)
    knee = switchml_models.switchml_line_rate_ate(link_bps, k) * round_trip_s / k  # where the window reaches the line rate
    pools = config["sweep"]["values"]
    assert math.ceil(knee) in pools, f"knee at {knee:.1f} slots, sweep {pools}"
    assert any(0.8 * knee <= pool < knee for pool in pools) and any(knee < pool <= 1.25 * knee for pool in pools), pools
    assert f"knee at {math.ceil(knee)} slots" in (catalog.LABS_DIR / "README.md").read_text()


def test_a_lab_figures_subtitle_fits_the_figure() -> None:
    """Lab 4's subtitle (links, delay mechanism, switch, not-kept-up reasons) ran off the figure's right edge."""
    pools = [4, 8, 16, 24, 32, 37, 44, 64]
    table = pd.DataFrame({"pool_size": pools, "normalised_median": 0.5, "normalised_min": 0.4, "normalised_max": 0.6,
                          "model_normalised": 0.6, "round_trip_s": 0.0212})  # fmt: skip
    context = EmulationContext((2.5,), ("embedded",), ("lab4-pool: summary.json kept_up is false",), ("10 ms (switch_delay_line)",))
    fig = pool_model_figure(table, context)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    subtitle = fig.axes[0].get_title(loc="left")
    assert "(not the paper's hardware)" in subtitle
    [text] = [child for child in fig.axes[0].get_children() if isinstance(child, Text) and child.get_text() == subtitle]
    assert text.get_window_extent(canvas.get_renderer()).x1 <= fig.bbox.x1, "the subtitle runs off the figure's right edge"


INSTRUCTOR_DIR = catalog.LABS_DIR / "instructor"
INSTRUCTOR_MARK = "INSTRUCTOR ONLY: never in a handout."


def test_every_lab_has_an_answer_key_and_rubric() -> None:
    for lab in LABS:
        key = (INSTRUCTOR_DIR / f"lab{lab.number}.md").read_text()
        assert INSTRUCTOR_MARK in key and "Rubric" in key and "## Expected figure" in key, lab.name
        questions = re.findall(r"^(\d+)\. ", (lab.folder / "README.md").read_text().split("## Questions")[1].split("\n## ")[0], re.MULTILINE)
        answered = re.findall(r"^(\d+)\. \*\*", key.split("## Questions")[1].split("\n## ")[0], re.MULTILINE)
        assert answered == questions, f"{lab.name}: questions {questions}, answered {answered}"
    assert "## The comparison: rubric" in (INSTRUCTOR_DIR / "lab5.md").read_text()


@pytest.mark.parametrize(("lab", "track"), [(lab, track) for lab, track in (case.values for case in TRACK_CASES)],
                         ids=[case.id for case in TRACK_CASES])  # fmt: skip
def test_no_handout_holds_the_answer_key(lab: catalog.Lab, track: catalog.Track, tmp_path: Path) -> None:
    """Neither the default handout nor one that keeps every other lab's answers: no file of
    labs/instructor/, and no file that quotes it."""
    for keep in (None, frozenset(n for n in range(len(LABS)) if n != lab.number)):
        tree = tmp_path / f"keep-{keep is not None}"
        make_skeleton(REPO_ROOT, tree, lab, track, keep)
        assert not (tree / "labs" / "instructor").exists()
        quoting = [str(path.relative_to(tree)) for path in tree.rglob("*") if path.is_file() and ".git" not in path.parts
                   and INSTRUCTOR_MARK.encode() in path.read_bytes() and path.name != "test_labs.py"]  # fmt: skip
        assert not quoting, f"handout files quote the answer key: {quoting}"


def test_the_answer_keys_computed_numbers_are_the_models() -> None:
    """What the key computes (lab 0's shares and bound, lab 4's round trip, knee, slots and
    bytes, the model's shares per pool) is what the reference models give."""
    lab0, lab4 = ((INSTRUCTOR_DIR / f"lab{n}.md").read_text() for n in (0, 4))
    shares = [100 * 4 * k / frame_bytes(k) for k in (32, 256)]
    assert f"**{shares[0]:.1f} %** at k = 32" in lab0 and f"**{shares[1]:.1f} %** at k = 256" in lab0
    assert f"**{switchml_models.switchml_line_rate_ate(100e9, 256):.2e} elements/s**".replace("e+09", "e9") in lab0
    link_bps, k = mbps_to_bps(2.5), 32
    round_trip_s = switchml_models.slot_round_trip_s(link_bps, k, 0.010)
    knee = switchml_models.switchml_line_rate_ate(link_bps, k) * round_trip_s / k
    assert f"**{round_trip_s * 1e3:.2f} ms**" in lab4 and f"**{knee:.1f} frames**" in lab4
    slots = math.ceil(switchml_models.switchml_line_rate_ate(100e9, 256) * 10e-6 / 256)
    assert f"**{slots} slots**" in lab4 and f"**{slots * 256 * 4 * 2:,} bytes" in lab4
    row = next(line for line in lab4.splitlines() if line.startswith("| model"))
    pools = [int(p) for p in next(line for line in lab4.splitlines() if line.startswith("| pool")).split("|")[2:-1]]
    line_rate = switchml_models.switchml_line_rate_ate(link_bps, k)
    expected = [switchml_models.switchml_pool_bound_ate(link_bps, k, pool, round_trip_s) / line_rate for pool in pools]
    assert [cell.strip() for cell in row.split("|")[2:-1]] == [f"{100 * share:.3g} %" for share in expected]
