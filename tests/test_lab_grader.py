"""An instructor's grade treats every submission as hostile (labs/sandbox.py, labs/grade.py, labs/record.py).

One batch of lab 0 submissions is graded the way a course grades them (``grade-batch`` with
``--tests-from`` a private fork): each attack a student tried on the old grader, each
followed by an untouched handout (1 point of 10: the test its stub does not reach), and a
correct solution last (10 of 10). Every attack must score no more than the handout, and
the submission graded after it must keep its grade. Four of them forge the verdict from
inside the process that runs the student's code (a pytest hook found through ``gc``, an
``atexit`` rewrite of the JUnit report, the report written at import and ``os._exit(0)``,
and that one packed with zlib and base85): they win wherever pytest's verdict is the
grade, and score nothing of record, where the grader compares outputs outside. Where an attack is one a grade in
place (the student's own ``labs grade``, no sandbox) falls for, the test grades it in place
too and expects the attack to win there: the attack is real, the sandbox is what stops it.
The four forgeries are also graded on labs 2 and 3, both tracks (``forged_batch``).
"""

from __future__ import annotations

import base64
import contextlib
import csv
import json
import os
import signal
import socketserver
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from analysis.switchml import models as switchml_models
from base.cgroup import CappedGroup, CgroupError, find_parent
from labs import catalog, sandbox
from labs.__main__ import main
from labs.grade import grade
from labs.markers import scan_file
from labs.sandbox import SandboxError, check_can_sandbox
from labs.skeleton import copy_tree, fill_regions, make_skeleton
from protocol.params import REPO_ROOT
from switches.target import Toolchain
from tests.conftest import IN_SANDBOX_GROUP, closed_to_others, require_target
from tests.test_labs import git_checkout

pytestmark = [pytest.mark.netns, IN_SANDBOX_GROUP]  # the sandbox: namespaces and another user, root only

LAB = catalog.by_number(0)
TRACK = LAB.track(None)
ANSWER_FILE = "methods/switchml.py"
HANDOUT_SCORE, CAP_S, MEMORY_MB = 1, 40, 1024

FORCE_PASS = """\
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    report.outcome, report.longrepr = "passed", None
"""
"""A pytest plugin that reports every test as passed."""

CORRECT = "return k * link_bps / (8 * frame_bytes(k))"

THROUGH_THE_VENV = f"""
import glob, importlib.util, os, sys
roots = [{str(REPO_ROOT)!r}]  # the grader's checkout, as a student who learned its path
for finder in glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages", "__editable__*finder.py")):
    spec = importlib.util.spec_from_file_location("editable_finder", finder)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    roots += [os.path.dirname(path) for path in module.MAPPING.values()]
for root in roots:
    path = os.path.join(root, "methods", "switchml.py")
    if os.path.isfile(path):
        spec = importlib.util.spec_from_file_location("the_reference", path)
        reference = sys.modules["the_reference"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(reference)
        return reference.line_rate_ate(link_bps, k)
raise NotImplementedError("no reference in sight")
"""

PLANTING = f"""
import glob, os, pathlib
force_pass = {FORCE_PASS!r}
folders = glob.glob("/tmp/labs-grade-*/clean") + glob.glob("/tmp/labs-grade-*/clean/tests")
for cmdline in pathlib.Path("/proc").glob("*/cmdline"):
    try:
        argv = [os.fsdecode(arg) for arg in cmdline.read_bytes().split(b"\\0")]
    except OSError:
        continue
    for flag, value in zip(argv, argv[1:]):
        if flag == "--tests-from":
            folders += [value, os.path.join(value, "tests"), *glob.glob(os.path.join(value, "labs", "*", "tests"))]
        if flag == "grade-batch" or os.path.isdir(os.path.join(value, "{ANSWER_FILE.split("/")[0]}")):
            folders += glob.glob(os.path.join(value, "*"))
for folder in folders:
    try:
        pathlib.Path(folder, "conftest.py").write_text(force_pass)
    except OSError:
        pass
raise NotImplementedError("planted")
"""

FORKS, SHARE_MB = 5, 256
"""The forking attack: 5 children of 256 MB each, each below the per-process cap (1024 MB
of address space with pytest's own), 1.25 GB together, above the sandbox's 1024 MB. Its
five graded tests took 4-5 s each on a busy 2-core machine (the kernel reclaims what it
can before it kills): CAP_S leaves it room."""

FORKING = f"""
import os
release_read, release_write = os.pipe()  # the children keep their memory until all have answered
answers = []
for _ in range({FORKS}):
    read, write = os.pipe()
    if os.fork() == 0:  # a child: its share of the work, in memory of its own
        try:
            os.close(read)
            os.close(release_write)
            share = b"x" * ({SHARE_MB} << 20)
            os.write(write, repr(k * link_bps / (8 * frame_bytes(k)) + share.count(b"y")).encode())
            os.read(release_read, 1)
        finally:
            os._exit(0)
    os.close(write)
    answers.append(read)
shares = [os.read(read, 64) for read in answers]
os.close(release_write)
for _ in answers:
    os.wait()
if not all(shares):
    raise RuntimeError("a share of the work was lost")
return float(shares[0])
"""


@dataclass(frozen=True)
class Attack:
    name: str
    answer: str
    """The body of lab 0's region."""
    files: dict[str, str]
    """More files at the submission's root."""
    wins_in_place: bool
    """Whether a grade in place falls for it (full marks): the control."""
    prelude: str = ""
    """Lines the graded file runs when it is imported (at its end)."""


GC_HOOK = """
import gc as _gc
try:
    import pytest as _pytest

    class _PassEverything:
        @_pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(self, item, call):
            report = (yield).get_result()
            report.outcome, report.longrepr = "passed", None

    for _config in [found for found in _gc.get_objects() if type(found).__name__ == "Config" and hasattr(found, "pluginmanager")]:
        _config.pluginmanager.register(_PassEverything(), "pass-everything")
except Exception:
    pass
"""
"""A pytest plugin registered from the graded file, pytest's config found through ``gc``."""

FORGE_JUNIT = """
import atexit as _atexit, os as _os, sys as _sys


def _forge():
    ids = [arg for arg in _sys.argv if "::" in arg]
    cases = "".join('<testcase classname="%s" name="%s" time="0.1"/>' % (
        ".".join([i.split("::")[0][:-3].replace("/", "."), *i.split("::")[1:-1]]), i.split("::")[-1]) for i in ids)
    report = '<?xml version="1.0"?><testsuites><testsuite name="pytest">%s</testsuite></testsuites>' % cases
    paths = [arg.split("=", 1)[1] for arg in _sys.argv if arg.startswith("--junitxml=")]
    paths += [_os.path.join("/grade/out", name) for name in (_os.listdir("/grade/out") if _os.path.isdir("/grade/out") else [])]
    for path in paths:
        try:
            with open(path, "w") as out:
                out.write(report)
        except OSError:
            pass
"""
"""A JUnit XML report in which every test named on the command line passed, written over
the report pytest was told to write and over every file in the sandbox's report folder."""

ATEXIT = FORGE_JUNIT + "_atexit.register(_forge)\n"
IMPORT_EXIT = FORGE_JUNIT + "_forge()\n_os._exit(0)\n"
PACKED = "import zlib, base64\nexec(zlib.decompress(base64.b85decode({!r})))\n".format(
    base64.b85encode(zlib.compress(IMPORT_EXIT.encode())).decode())
"""IMPORT_EXIT with none of the words a reader would search the submissions for."""

STUB = "raise NotImplementedError"

ATTACKS = [
    Attack("conftest", "raise NotImplementedError", {"conftest.py": FORCE_PASS}, True),
    Attack("sitecustomize", "raise NotImplementedError", {"sitecustomize.py": "import os\nos.environ['PYTEST_PLUGINS'] = 'forcepass'\n",
                                                          "forcepass.py": FORCE_PASS}, True),  # fmt: skip
    Attack("venv", THROUGH_THE_VENV, {}, True),
    Attack("network", "import socket\nwith socket.create_connection(('127.0.0.1', PORT), timeout=5) as s:\n"
                      "    s.sendall(f'{link_bps} {k}\\n'.encode())\n    return float(s.makefile().readline())", {}, True),  # fmt: skip
    Attack("planting", PLANTING, {}, False),
    Attack("infinite-loop", "while True:\n    pass", {}, False),
    Attack("memory", f"hog = b'x' * ({2 * MEMORY_MB} << 20)\n{CORRECT}", {}, False),
    Attack("forking", FORKING, {}, True),
    Attack("gc-hook", STUB, {}, True, GC_HOOK),
    Attack("atexit-junit", STUB, {}, True, ATEXIT),
    Attack("import-exit", STUB, {}, True, IMPORT_EXIT),
    Attack("packed", STUB, {}, True, PACKED),
]


class _Bounds(socketserver.StreamRequestHandler):
    """Answers 'link_bps k' with the bound: the help a submission must not reach from the sandbox."""

    def handle(self) -> None:
        link_bps, k = self.rfile.readline().split()
        self.wfile.write(f"{switchml_models.switchml_line_rate_ate(float(link_bps), int(k))!r}\n".encode())


@pytest.fixture(scope="module")
def helper_port() -> Iterator[int]:
    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Bounds) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        yield server.server_address[1]
        server.shutdown()


def _require_sandbox() -> None:
    try:
        check_can_sandbox()
    except SandboxError as error:
        pytest.skip(str(error))


def _require_memory_cgroup() -> None:
    """Where no cgroup can be made, the caps are per process and the forking attack wins."""
    try:
        find_parent()
    except CgroupError as error:
        pytest.skip(f"no memory cgroup can be made here, the sandbox caps each process only: {error}")


def _submission(tree: Path, answer: str, files: dict[str, str], port: int, prelude: str = "") -> Path:
    """Lab 0's handout at ``tree`` with ``answer`` in its region, ``prelude`` at the end of
    its graded file and ``files`` at its root."""
    make_skeleton(REPO_ROOT, tree, LAB, TRACK)
    [region] = [region for region in scan_file(tree, ANSWER_FILE) if region.lab == LAB.number]
    lines = [f"{region.indent}{line}" for line in textwrap.dedent(answer.replace("PORT", str(port))).strip("\n").splitlines()]
    (tree / ANSWER_FILE).write_text(fill_regions((tree / ANSWER_FILE).read_text(), {region: lines}) + prelude)
    for name, text in files.items():
        (tree / name).write_text(text)
    return tree


def _listing(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file() and ".git" not in path.parts}  # fmt: skip


@dataclass(frozen=True)
class Batch:
    rows: dict[str, dict[str, str]]
    reports: Path
    fork_before: dict[str, bytes]
    fork_after: dict[str, bytes]
    submissions_before: dict[str, bytes]
    submissions_after: dict[str, bytes]


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory, helper_port: int) -> Batch:
    """The attacks, each followed by a handout, and a correct solution, graded as one batch."""
    _require_sandbox()
    root = tmp_path_factory.mktemp("course")
    fork = root / "private-fork"
    copy_tree(REPO_ROOT, fork)
    git_checkout(fork)
    submissions = root / "submissions"
    for number, attack in enumerate(ATTACKS):
        _submission(submissions / f"{number:02d}a-{attack.name}", attack.answer, attack.files, helper_port, attack.prelude)
        _submission(submissions / f"{number:02d}b-after-{attack.name}", "raise NotImplementedError", {}, helper_port)
    _submission(submissions / "99-correct", CORRECT, {}, helper_port)
    fork_before, submissions_before = _listing(fork), _listing(submissions)
    grades = root / "grades.csv"
    assert main(["grade-batch", "0", str(submissions), "--csv", str(grades), "--tests-from", str(fork),
                 "--cap-s", str(CAP_S), "--memory-mb", str(MEMORY_MB)]) == 0  # fmt: skip
    rows = {row["student"]: row for row in csv.DictReader(grades.open())}
    return Batch(rows, root / "grades", fork_before, _listing(fork), submissions_before, _listing(submissions))


@pytest.mark.parametrize("number", range(len(ATTACKS)), ids=[attack.name for attack in ATTACKS])
def test_an_attack_loses_its_points_and_leaves_the_next_grade_unchanged(
    number: int, batch: Batch, helper_port: int, tmp_path: Path
) -> None:
    attack = ATTACKS[number]
    if attack.name == "forking":
        _require_memory_cgroup()
    attacker, after = batch.rows[f"{number:02d}a-{attack.name}"], batch.rows[f"{number:02d}b-after-{attack.name}"]
    assert int(attacker["score"]) <= HANDOUT_SCORE, f"{attack.name} scored {attacker['score']}/10 in the sandbox"
    assert int(after["score"]) == HANDOUT_SCORE, f"the handout graded after {attack.name} scored {after['score']}/10"
    assert batch.rows["99-correct"]["score"] == "10", "a correct solution keeps full marks in the sandbox"
    if attack.wins_in_place:
        tree = _submission(tmp_path / "in-place", attack.answer, attack.files, helper_port, attack.prelude)
        assert grade(LAB, TRACK, tree).full_marks, f"control: graded in place, {attack.name} should have won"


def test_a_submission_writes_nothing_outside_the_sandbox(batch: Batch) -> None:
    """The planting attack found the fork through /proc/*/cmdline and the other submissions
    beside its own folder: neither may change."""
    assert batch.fork_after == batch.fork_before, "the --tests-from folder changed"
    assert batch.submissions_after == batch.submissions_before, "a submission folder changed"


def test_the_cap_ends_an_infinite_loop_and_the_memory_cap_fails_its_test(batch: Batch) -> None:
    number = next(i for i, attack in enumerate(ATTACKS) if attack.name == "infinite-loop")
    loop = json.loads((batch.reports / f"{number:02d}a-infinite-loop.json").read_text())
    assert loop["seconds"] <= CAP_S + 5, f"an infinite loop took {loop['seconds']} s, over its {CAP_S} s cap"
    assert {test["outcome"] for test in loop["tests"]} == {"not run"}
    assert f"did not finish within its {CAP_S} s cap" in loop["tests"][0]["message"]
    number = next(i for i, attack in enumerate(ATTACKS) if attack.name == "memory")
    memory = json.loads((batch.reports / f"{number:02d}a-memory.json").read_text())
    assert any("MemoryError" in test["message"] for test in memory["tests"]), memory["tests"]


def test_the_memory_cap_holds_for_all_processes_together_and_its_cgroup_is_removed(batch: Batch) -> None:
    """The forking attack's children each stayed below the per-process cap: the cgroup's
    cap on all of them together ended them, the report's first line says so, and no
    cgroup of the sandbox's is left."""
    _require_memory_cgroup()
    number = next(i for i, attack in enumerate(ATTACKS) if attack.name == "forking")
    forking = json.loads((batch.reports / f"{number:02d}a-forking.json").read_text())
    assert (forking["problem"] or "").startswith(f"the submission's processes together reached its {MEMORY_MB} MB memory cap"), forking
    parent, _ = find_parent()
    assert not list(parent.glob("labs-sandbox-*")), "a sandbox's cgroup was left behind"


def test_a_graded_file_that_is_a_link_is_not_followed(tmp_path: Path, capsys) -> None:
    """The grader is root: a link to the reference (or to a file only root reads) is not graded."""
    _require_sandbox()
    tree = _submission(tmp_path / "student", "raise NotImplementedError", {}, 0)
    (tree / ANSWER_FILE).unlink()
    (tree / ANSWER_FILE).symlink_to(REPO_ROOT / ANSWER_FILE)
    report = tmp_path / "grade.json"
    assert main(["grade", "0", "--tree", str(tree), "--tests-from", str(REPO_ROOT), "--report", str(report)]) == 1
    graded = json.loads(report.read_text())
    assert graded["score"] <= HANDOUT_SCORE
    assert graded["problem"].startswith(f"{ANSWER_FILE} is a symbolic link"), graded["problem"]
    assert capsys.readouterr().out.startswith(f"your code does not run: {ANSWER_FILE} is a symbolic link")


def _sandboxed(tmp_path: Path, code: str, toolchain: Toolchain = Toolchain()) -> sandbox.Outcome:
    """Python ``code`` run in the sandbox under the tests' caps, with its tree, report folder and
    root in ``tmp_path`` (tree/, out/, root/)."""
    tree, out, root = tmp_path / "tree", tmp_path / "out", tmp_path / "root"
    for folder in (tree, out, root):
        folder.mkdir(exist_ok=True)
    return sandbox.run([sys.executable, "-c", code], root=root, tree=tree, out=out,
                       limits=sandbox.Limits(30, MEMORY_MB << 20, 64), toolchain=toolchain)  # fmt: skip


def test_the_sandbox_is_another_user_without_a_network(tmp_path: Path) -> None:
    """What the submission's code sees, asked from inside: a user that is root only in its
    own namespace, no route off the loopback, only its own processes, a read-only tree and
    no grader's checkout."""
    _require_sandbox()
    probe = textwrap.dedent(f"""
        import os, socket
        print("outside uid", open("/proc/self/uid_map").read().split()[1])
        print("processes", len([name for name in os.listdir("/proc") if name.isdigit()]))
        print("checkout visible", os.path.exists({str(REPO_ROOT / ANSWER_FILE)!r}))
        try:
            open("{sandbox.TREE}/planted.py", "w")
        except OSError as error:
            print("tree", error.strerror)
        try:
            socket.create_connection(("192.0.2.1", 80), timeout=2)
        except OSError as error:
            print("network", error.strerror)
    """)
    ran = _sandboxed(tmp_path, probe)
    assert ran.returncode == 0 and not ran.timed_out, ran.output
    assert ran.output.splitlines() == [f"outside uid {sandbox.SANDBOX_ID}", "processes 1", "checkout visible False",
                                       "tree Read-only file system", "network Network is unreachable"], ran.output  # fmt: skip
    assert not (tmp_path / "tree" / "planted.py").exists() and not list((tmp_path / "root").iterdir()), "the sandbox leaves nothing behind"


def test_where_no_cgroup_can_be_made_the_sandbox_says_so_once_and_caps_each_process(tmp_path: Path, monkeypatch, caplog) -> None:
    """The fallback: RLIMIT_AS per process, and one log line saying that it is the only cap."""
    _require_sandbox()

    @contextlib.contextmanager
    def no_cgroup(prefix: str, **caps: float) -> Iterator[CappedGroup]:
        yield CappedGroup((), dict.fromkeys(["memory", "cpu"], "none in this test"))

    monkeypatch.setattr(sandbox, "capped_group", no_cgroup)
    sandbox._no_cgroup.cache_clear()
    for _ in range(2):
        ran = _sandboxed(tmp_path, f"b'x' * ({2 * MEMORY_MB} << 20)")
        assert "MemoryError" in ran.output and ran.oom_kills == 0, ran.output
    said = [record.getMessage() for record in caplog.records if "no memory cgroup" in record.getMessage()]
    assert said == [f"no memory cgroup for the sandbox (none in this test): each process of a submission is capped at {MEMORY_MB} MB"
                    " of address space, not all of them together"], said  # fmt: skip


def test_a_toolchain_outside_the_system_folders_is_in_the_sandbox_and_nothing_beside_it(tmp_path: Path) -> None:
    """A switch target's tools installed in a folder of their own (a prebuilt bmv2 and p4c,
    found on the grader's PATH and PYTHONPATH) are bound read-only where they are, their
    programs find what lies beside their bin/ (../lib), and the folder's neighbours stay out."""
    _require_sandbox()
    prefix = tmp_path / "toolchain"
    for folder in ("bin", "lib", "python/fake_runtime"):
        (prefix / folder).mkdir(parents=True)
    (prefix / "bin" / "fake-switch").write_text('#!/bin/sh\ncat "$(dirname "$0")/../lib/data"\n')
    (prefix / "bin" / "fake-switch").chmod(0o755)
    (prefix / "lib" / "data").write_text("found beside its bin\n")
    (prefix / "python" / "fake_runtime" / "__init__.py").write_text("NAME = 'fake runtime'\n")
    (tmp_path / "neighbour").write_text("not the sandbox's\n")
    toolchain = Toolchain((prefix / "bin",), (prefix / "python",), {"FAKE_INCLUDE_PATH": str(prefix / "lib")})
    assert sandbox.toolchain_folders(toolchain) == [prefix]
    probe = textwrap.dedent(f"""
        import os, subprocess, fake_runtime
        print(subprocess.run(["fake-switch"], capture_output=True, text=True).stdout.strip())
        print(fake_runtime.NAME, os.environ["FAKE_INCLUDE_PATH"] == {str(prefix / "lib")!r})
        print("neighbour visible", os.path.exists({str(tmp_path / "neighbour")!r}))
        try:
            open({str(prefix / "planted")!r}, "w")
        except OSError as error:
            print("toolchain", error.strerror)
    """)
    ran = _sandboxed(tmp_path, probe, toolchain=toolchain)
    assert ran.returncode == 0 and not ran.timed_out, ran.output
    assert ran.output.splitlines() == ["found beside its bin", "fake runtime True", "neighbour visible False",
                                       "toolchain Read-only file system"], ran.output  # fmt: skip


def _sandboxed_processes() -> list[str]:
    """The pids of processes running as the sandbox's user."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uids = next(line for line in status.read_text().splitlines() if line.startswith("Uid:")).split()[1:]
        except (OSError, StopIteration):
            continue
        if str(sandbox.SANDBOX_ID) in uids:
            found.append(status.parent.name)
    return found


def test_a_grade_stopped_midway_leaves_no_process_and_no_temporary_tree(tmp_path: Path) -> None:
    """SIGTERM while a submission loops in its sandbox: the grader exits 143, the sandbox's
    processes die with it, and its clean tree, the submission's copy and its memory cgroup
    are removed."""
    _require_sandbox()
    assert not _sandboxed_processes(), "a sandbox of another grade is running"
    _submission(tmp_path / "submissions" / "looping", "while True:\n    pass", {}, 0)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    grader = subprocess.Popen([sys.executable, "-m", "labs", "grade-batch", "0", str(tmp_path / "submissions"),
                               "--csv", str(tmp_path / "grades.csv"), "--tests-from", str(REPO_ROOT)],
                              cwd=REPO_ROOT, env={**os.environ, "TMPDIR": str(scratch)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while not _sandboxed_processes() and time.monotonic() < deadline and grader.poll() is None:
        time.sleep(0.2)
    assert _sandboxed_processes(), "the submission never started"
    time.sleep(1)
    grader.send_signal(signal.SIGTERM)
    output, _ = grader.communicate(timeout=30)
    assert grader.returncode == 128 + signal.SIGTERM, output
    deadline = time.monotonic() + 5
    while _sandboxed_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _sandboxed_processes(), "the sandbox outlived its grader"
    assert not list(scratch.iterdir()), f"left behind: {list(scratch.iterdir())}"
    with contextlib.suppress(CgroupError):
        assert not list(find_parent()[0].glob("labs-sandbox-*")), "the sandbox's memory cgroup outlived its grader"


@pytest.mark.parametrize(("number", "track"), [
    pytest.param(2, "python", id="lab2"),
    pytest.param(3, "python", id="lab3", marks=[pytest.mark.mininet, pytest.mark.slow]),
    pytest.param(2, "p4", id="lab2-p4", marks=[pytest.mark.bmv2]),
    pytest.param(3, "p4", id="lab3-p4", marks=[pytest.mark.bmv2]),
])  # fmt: skip
def test_the_labs_that_make_networks_get_full_marks_in_the_sandbox(number: int, track: str, tmp_path: Path) -> None:
    """Lab 2's packet tests make network namespaces, lab 3's end-to-end test a Mininet
    network: as root of its own user namespace (with its own /sys and pseudo-terminals) the
    sandbox runs both, so the reference still gets full marks there. The p4 track's run
    bmv2 and p4c, which the sandbox holds where the grader's environment finds them."""
    _require_sandbox()
    if track == "p4":
        require_target("bmv2")
    copy_tree(REPO_ROOT, tmp_path / "submissions" / "reference")
    grades = tmp_path / "grades.csv"
    assert main(["grade-batch", str(number), str(tmp_path / "submissions"), "--csv", str(grades), "--track", track]) == 0
    [row] = csv.DictReader(grades.open())
    report = json.loads((tmp_path / "grades" / "reference.json").read_text())
    assert row["score"] == row["max"], [(t["id"], t["message"]) for t in report["tests"] if t["outcome"] != "pass"]


def test_an_instructors_grade_without_root_says_why_in_one_line(tmp_path: Path) -> None:
    """Not root: no sandbox, so no instructor's grade (never a grade in place instead)."""
    _require_sandbox()  # root, to become someone else
    closed = closed_to_others(Path(sys.executable).parent) or closed_to_others(REPO_ROOT.parent)
    if closed is not None:  # e.g. a checkout under mktemp -d's 0700 folder
        pytest.skip(f"user nobody cannot reach this checkout or its Python: {closed} is not searchable by others")
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m", "labs", "grade", "0",
                           "--tree", str(REPO_ROOT), "--tests-from", str(REPO_ROOT), "--report", str(tmp_path / "grade.json")],
                          cwd=REPO_ROOT, env={**os.environ, "HOME": str(tmp_path)}, capture_output=True, text=True, timeout=60)  # fmt: skip
    [line] = done.stderr.strip().splitlines()
    assert done.returncode == 2 and line.endswith(
        " labs ERROR grading a submission runs it in a sandbox (namespaces, another user): run the grader as root"), done.stderr
    assert not (tmp_path / "grade.json").exists()


FORGERIES = {"gc-hook": GC_HOOK, "atexit-junit": ATEXIT, "import-exit": IMPORT_EXIT, "packed": PACKED}
"""The four verdict forgeries, each appended to every Python file a track grades."""


@pytest.fixture(scope="module", params=[
    pytest.param((2, "python"), id="lab2"),
    pytest.param((3, "python"), id="lab3"),
    pytest.param((2, "p4"), id="lab2-p4", marks=[pytest.mark.bmv2]),
    pytest.param((3, "p4"), id="lab3-p4", marks=[pytest.mark.bmv2]),
])  # fmt: skip
def forged_batch(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[catalog.Track, dict[str, dict[str, str]]]:
    """Labs 2 and 3, each track: the handout and the four forgeries of it, graded as one
    batch from a private fork; the rows by forgery. A track that grades no Python file
    (lab 2's p4: the P4 program) gets the four forgeries together, one after the other, as
    a conftest.py and a sitecustomize.py beside its program, which the grader never copies
    (copied, the first forgery that ends the process would decide): one submission, as each
    of the four would be graded alike, and each p4 grade starts bmv2."""
    _require_sandbox()
    number, name = request.param
    if name == "p4":
        require_target("bmv2")
    lab = catalog.by_number(number)
    track = lab.track(name)
    root = tmp_path_factory.mktemp(f"lab{number}-{name}")
    fork = root / "private-fork"
    copy_tree(REPO_ROOT, fork)
    git_checkout(fork)
    submissions = root / "submissions"
    make_skeleton(REPO_ROOT, submissions / "handout", lab, track)
    python = [file for file in track.files if file.endswith(".py")]
    if python:
        for attack, prelude in FORGERIES.items():
            tree = submissions / attack
            make_skeleton(REPO_ROOT, tree, lab, track)
            for file in python:
                with (tree / file).open("a") as graded:
                    graded.write(prelude)
    else:
        tree = submissions / "every-forgery"
        make_skeleton(REPO_ROOT, tree, lab, track)
        for file in ("conftest.py", "sitecustomize.py"):
            (tree / file).write_text("".join(FORGERIES.values()))
    grades = root / "grades.csv"
    assert main(["grade-batch", str(number), str(submissions), "--track", name, "--csv", str(grades), "--tests-from", str(fork)]) == 0
    rows = {row["student"]: row for row in csv.DictReader(grades.open())}
    return track, {"handout": rows["handout"]} | {attack: rows[attack if python else "every-forgery"] for attack in FORGERIES}


@pytest.mark.parametrize("attack", FORGERIES)
def test_a_forged_verdict_scores_what_the_handout_earns_on_labs_2_and_3(
    attack: str, forged_batch: tuple[catalog.Track, dict[str, dict[str, str]]]
) -> None:
    """On every track of the labs that make networks, the handout earns exactly the points
    of the tests lab.yaml says its skeleton passes, and a forgery earns no more: every test
    that runs the submission's Python is decided by the grader from outputs, and every
    pytest session that decides one holds none of its Python (lab.yaml's ``uses``)."""
    track, rows = forged_batch
    handout = sum(test.points for test in track.tests if test.skeleton == "pass")
    assert int(rows["handout"]["score"]) == handout, rows["handout"]
    assert int(rows[attack]["score"]) <= handout, f"{attack} scored {rows[attack]['score']}/{track.points}: {rows[attack]}"
