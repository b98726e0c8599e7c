"""The sandbox an instructor's grade runs a submission in (labs/sandbox.py): what it sees of
the machine, and its caps on output, disk and CPU.

Each isolation test runs with the sandbox bubblewrap builds and with the shell script that
builds it where bubblewrap is missing (the ``builder`` fixture). The attacks are the ones
that beat the previous sandbox: a submission that left a lab's answer in the machine's BPF
filesystem (reached through a /sys it could unmount) for the next to read; 100 MB of
output, which the grader held in memory; 3 GB written to the grader's disk; eight busy
processes that took the machine's two cores.
"""

from __future__ import annotations

import csv
import json
import os
import resource
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from base.cgroup import CgroupError, find_parent
from labs import catalog, sandbox
from labs.__main__ import main
from labs.sandbox import SandboxError, check_can_sandbox
from labs.skeleton import copy_tree, fill_regions, make_skeleton
from labs.markers import scan_file
from protocol.params import REPO_ROOT
from tests.conftest import IN_SANDBOX_GROUP
from tests.test_labs import git_checkout

pytestmark = [pytest.mark.netns, IN_SANDBOX_GROUP]  # the sandbox: namespaces and another user, root only

LAB = catalog.by_number(0)
TRACK = LAB.track(None)
ANSWER_FILE = "methods/switchml.py"
CORRECT = "return k * link_bps / (8 * frame_bytes(k))"
PLANTED = "lab0-answer"
"""The name of the file the planting submission leaves wherever it can write."""
HOST_PLACES = [Path("/sys/fs/bpf"), Path("/dev/shm"), Path("/tmp"), Path("/var/tmp"), Path("/run"), Path("/run/lock")]
"""Where on the machine a planted file would outlive its sandbox."""


@pytest.fixture(params=["bwrap", "unshare"])
def builder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The sandbox bubblewrap builds, and the one the shell script builds where it is missing."""
    try:
        check_can_sandbox()
    except SandboxError as error:
        pytest.skip(str(error))
    if request.param == "bwrap" and sandbox.find_bwrap() is None:
        pytest.skip("bubblewrap (bwrap) is not installed")
    if request.param == "unshare":
        monkeypatch.setattr(sandbox, "find_bwrap", lambda: None)
    yield request.param


def _sandboxed(tmp_path: Path, code: str, limits: sandbox.Limits) -> sandbox.Outcome:
    """Python ``code`` run in the sandbox under ``limits``, with its tree, report folder and
    root in ``tmp_path`` (tree/, out/, root/)."""
    tree, out, root = tmp_path / "tree", tmp_path / "out", tmp_path / "root"
    for folder in (tree, out, root):
        folder.mkdir(exist_ok=True)
    return sandbox.run([sys.executable, "-c", textwrap.dedent(code)], root=root, tree=tree, out=out, limits=limits)


LIMITS = sandbox.Limits(60, 1024 << 20, 64)

READ_ONLY = ["/usr", "/etc", "/grade/tree", sys.prefix]
WRITABLE = [str(folder) for folder in LIMITS.writable()]
WHAT_IT_SEES = f"""
    import os, subprocess
    READ_ONLY, WRITABLE = {READ_ONLY!r}, {WRITABLE!r}
    def tried(*command):
        done = subprocess.run(command, capture_output=True, text=True)
        return "ok" if done.returncode == 0 else "refused"
    print("root", sorted(os.listdir("/")))
    print("umount /sys", tried("umount", "/sys"), sorted(os.listdir("/sys")))
    print("grader's folder", tried("ls", "/.grader"))
    for target in READ_ONLY:
        print("remount", target, tried("mount", "-o", "remount,bind,rw", target))
    for target in READ_ONLY + WRITABLE:
        print("umount", target, tried("umount", "-l", target))
"""


def test_the_sandbox_holds_nothing_of_the_machine_it_could_write_or_unmount(builder: str, tmp_path: Path) -> None:
    """Its root holds the system's folders, the grader's Python, its own folders and
    nothing else; its /sys is its own (unmounted, an empty folder: no BPF filesystem, no
    cgroup of the machine behind it); the sysfs kept for it is root's alone; and it can
    neither remount a folder of the machine writable nor unmount one of its folders."""
    ran = _sandboxed(tmp_path, WHAT_IT_SEES, LIMITS)
    assert ran.returncode == 0 and not ran.timed_out, ran.output
    held = {name for name in sandbox.SYSTEM_FOLDERS if (Path("/") / name).exists()}
    held |= {Path(sys.prefix).parts[1], Path(sys.base_prefix).parts[1]}
    expected = sorted(held | {".grader", "dev", "grade", "proc", "run", "sys", "tmp", "var"})
    lines = ran.output.splitlines()
    assert lines[0] == f"root {expected}", ran.output
    assert lines[1:3] == ["umount /sys ok []", "grader's folder refused"], ran.output
    remounts, umounts = lines[3 : 3 + len(READ_ONLY)], lines[3 + len(READ_ONLY) :]
    assert remounts == [f"remount {target} refused" for target in READ_ONLY], ran.output
    assert umounts == [f"umount {target} refused" for target in READ_ONLY + WRITABLE], ran.output


def test_a_sandbox_that_cannot_be_built_is_the_graders_error_not_a_zero(tmp_path: Path, monkeypatch) -> None:
    """Where bubblewrap (or unshare) refuses (a container without the capabilities it
    needs), no submission runs: a SandboxError, which stops the grade with its line, rather
    than a class of zeros."""
    try:
        check_can_sandbox()
    except SandboxError as error:
        pytest.skip(str(error))
    refusing = tmp_path / "bwrap"
    refusing.write_text("#!/bin/sh\necho 'bwrap: Creating new namespace failed: Operation not permitted' >&2\nexit 1\n")
    refusing.chmod(0o755)
    monkeypatch.setattr(sandbox, "find_bwrap", lambda: str(refusing))
    with pytest.raises(SandboxError, match=r"could not be built \(exit status 1\): bwrap: Creating new namespace failed"):
        _sandboxed(tmp_path, "print('never')", LIMITS)


def _submission(tree: Path, answer: str) -> Path:
    """Lab 0's handout at ``tree`` with ``answer`` in its region."""
    make_skeleton(REPO_ROOT, tree, LAB, TRACK)
    [region] = [region for region in scan_file(tree, ANSWER_FILE) if region.lab == LAB.number]
    lines = [f"{region.indent}{line}" for line in textwrap.dedent(answer).strip("\n").splitlines()]
    (tree / ANSWER_FILE).write_text(fill_regions((tree / ANSWER_FILE).read_text(), {region: lines}))
    return tree


PLANTING = f"""
import os, subprocess
if not os.environ.get("PLANTED"):
    os.environ["PLANTED"] = "1"
    subprocess.run(["umount", "/sys"], capture_output=True)  # the machine's /sys was behind it
    for folder, folders, _ in os.walk("/"):
        if folder.startswith("/proc"):
            folders.clear()
        elif os.access(folder, os.W_OK):
            try:  # a link's target holds it: a BPF filesystem takes links and folders, not files
                os.symlink("k * link_bps / (8 * frame_bytes(k))", os.path.join(folder, {PLANTED!r}))
            except OSError:
                pass
{CORRECT}
"""
"""A correct answer that leaves itself in every folder it can write, its /sys unmounted."""

READING = f"""
import os, subprocess
if "FOUND" not in os.environ:
    subprocess.run(["umount", "/sys"], capture_output=True)
    os.environ["FOUND"] = next((os.readlink(os.path.join(folder, {PLANTED!r})) for folder, folders, files in os.walk("/")
                                if not folder.startswith("/proc") and {PLANTED!r} in files), "")
if not os.environ["FOUND"]:
    raise NotImplementedError("no answer was left for me")
return eval(os.environ["FOUND"])
"""
"""No answer of its own: the one a submission graded before left, wherever it finds it."""


def test_a_submission_leaves_nothing_for_the_next_to_read(builder: str, tmp_path: Path) -> None:
    """Graded as an instructor grades a class: the planting submission's answer is correct
    (full marks), the reading one, graded after it, scores what the untouched handout does.
    On a machine whose BPF filesystem is world-writable (the kernel's default mode, in which
    the eBPF switch used to mount it), the previous sandbox let the reader score full marks."""
    fork = tmp_path / "private-fork"
    copy_tree(REPO_ROOT, fork)
    git_checkout(fork)
    submissions = tmp_path / "submissions"
    _submission(submissions / "1-planting", PLANTING)
    _submission(submissions / "2-reading", READING)
    _submission(submissions / "3-handout", "raise NotImplementedError")
    grades = tmp_path / "grades.csv"
    try:
        assert main(["grade-batch", "0", str(submissions), "--csv", str(grades), "--tests-from", str(fork)]) == 0
        rows = {row["student"]: row for row in csv.DictReader(grades.open())}
    finally:
        left = [place / PLANTED for place in HOST_PLACES if os.path.lexists(place / PLANTED)]
        for path in left:
            path.unlink()
    assert not left, f"a submission left files on the machine: {left}"
    assert rows["1-planting"]["score"] == rows["1-planting"]["max"], rows["1-planting"]
    assert rows["2-reading"]["score"] == rows["3-handout"]["score"], f"the reader scored {rows['2-reading']['score']}"


def _flood(megabytes: int) -> str:
    return f"""
        import os
        chunk = b"x" * (1 << 20)
        for _ in range({megabytes}):
            os.write(1, chunk)
        print("the last line")
    """


def test_the_output_is_cut_and_the_grader_stays_small(tmp_path: Path) -> None:
    """100 MB printed: the grader keeps its first and last halves of ``output_bytes`` (the
    last line among them) and says how much was cut; its own memory does not grow with it
    (the previous grader held it all, 2.88 GB for 100 MB)."""
    try:
        check_can_sandbox()
    except SandboxError as error:
        pytest.skip(str(error))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    ran = _sandboxed(tmp_path, _flood(100), LIMITS)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10) - before
    assert ran.returncode == 0 and not ran.timed_out, ran.output[-500:]
    assert ran.output_bytes > 100 << 20, ran.output_bytes
    assert len(ran.output) < LIMITS.output_bytes + 200 and ran.output.endswith("the last line\n"), ran.output[-200:]
    assert f"bytes of output cut here: the grader keeps the first and last {LIMITS.output_bytes // 2}" in ran.output
    assert ran.capped == "the submission printed 104.9 MB: the grader kept its first and last 512 KiB", ran.capped
    assert grown < 64 << 20, f"the grader grew by {grown >> 20} MB reading 100 MB of output"


DISK = sandbox.Limits(60, 1024 << 20, 64, tmp_bytes=8 << 20, disk_bytes=4 << 20, report_bytes=2 << 20)

FILLING = """
    import os
    chunk = b"x" * (1 << 20)
    for folder in ("/tmp", "/dev/shm", "/run", "/grade/tree/build", "/grade/tree/results", "/grade/out"):
        written = 0
        try:
            with open(os.path.join(folder, "filler"), "wb") as filler:
                for _ in range(3 << 10):  # 3 GB
                    written += filler.write(chunk)
                    filler.flush()
        except OSError as error:
            print(folder, written >> 20, error.strerror)
"""


def test_every_folder_it_writes_is_capped_and_the_grader_gets_at_most_the_report_cap(builder: str, tmp_path: Path) -> None:
    """3 GB written to each folder it can write: each stops at its cap (no space left), the
    outcome names the full folders, and the grader's report folder gets at most
    ``report_bytes`` (the previous sandbox wrote 3 GB in 2.3 s to the grader's disk)."""
    ran = _sandboxed(tmp_path, FILLING, DISK)
    assert ran.returncode == 0 and not ran.timed_out, ran.output
    sizes = {str(folder): size for folder, size in DISK.writable().items()}
    written = {line.split()[0]: int(line.split()[1]) for line in ran.output.splitlines()}
    assert written.keys() == sizes.keys(), ran.output
    assert all(written[folder] <= sizes[folder] >> 20 for folder in written), (written, sizes)
    assert set(ran.full) == set(sizes), ran.full
    assert ran.capped is not None and ran.capped.startswith("the submission filled /tmp (8 MB)"), ran.capped
    on_disk = sum(path.stat().st_size for path in (tmp_path / "out").rglob("*") if path.is_file())
    assert 0 < on_disk <= DISK.report_bytes, on_disk


SPINNING = """
    import multiprocessing, os, time

    def spin(seconds, results):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
        results.put(time.process_time())

    if __name__ == "__main__":
        results = multiprocessing.Queue()
        started = time.monotonic()
        workers = [multiprocessing.Process(target=spin, args=(4, results)) for _ in range(8)]
        for worker in workers:
            worker.start()
        used = sum(results.get() for _ in workers)
        for worker in workers:
            worker.join()
        print(used, time.monotonic() - started)
"""


def test_busy_processes_get_the_cpu_quota_of_all_of_them_together(builder: str, tmp_path: Path) -> None:
    """Eight processes spinning for 4 s get a tenth of a core between them, not the machine's
    cores (the previous sandbox's took 1.99 of 2): the CPU time they report is at most the
    quota times the time they ran (and a scheduler's slice), and the cgroup held them back.
    The quota is small so that it binds also on a machine other work keeps busy (with half a
    core, eight spinners got 0.34 of a core on a loaded 2-core machine, under the quota)."""
    try:
        find_parent("cpu")
    except CgroupError as error:
        pytest.skip(f"no cpu cgroup can be made here: {error}")
    limits = sandbox.Limits(60, 1024 << 20, 64, cpus=0.1)
    ran = _sandboxed(tmp_path, SPINNING, limits)
    assert ran.returncode == 0 and not ran.timed_out, ran.output
    used_s, wall_s = map(float, ran.output.split())
    assert used_s <= limits.cpus * wall_s + 0.2, f"{used_s:.2f} s of CPU in {wall_s:.2f} s, over {limits.cpus} core"
    assert ran.cpu_throttled_s > 0, ran


def test_a_flooding_or_filling_submission_loses_its_points_and_its_report_says_which_cap(tmp_path: Path) -> None:
    """Graded as an instructor grades: a lab 0 submission that prints 20 MB straight to the
    grader's pipe, one that fills /tmp and the report folder, and one that keeps eight
    processes busy score no more than the handout, and each report's first line names the
    cap it reached (the spinner's, the wall-clock cap)."""
    try:
        check_can_sandbox()
    except SandboxError as error:
        pytest.skip(str(error))
    submissions = tmp_path / "submissions"
    flooding = """
        import os, stat
        if not os.environ.get("FLOODED"):
            os.environ["FLOODED"] = "1"
            for fd in range(1, 64):  # the harness's 1 and 2 lead to the grader; under pytest, which captures them, its copies do
                try:
                    if stat.S_ISFIFO(os.fstat(fd).st_mode):
                        for _ in range(20):
                            os.write(fd, b"x" * (1 << 20))
                except OSError:
                    pass
        raise NotImplementedError
    """
    filling = """
        for folder in ("/tmp", "/grade/out"):
            try:
                with open(folder + "/filler", "wb") as filler:
                    while True:
                        filler.write(b"x" * (1 << 20))
                        filler.flush()
            except OSError:
                pass
        raise NotImplementedError
    """
    spinning = """
        import os
        for _ in range(8):
            if os.fork() == 0:
                while True:
                    pass
        while True:
            pass
    """
    attacks = {"flooding": flooding, "filling": filling, "spinning": spinning, "handout": "raise NotImplementedError"}
    for name, answer in attacks.items():
        _submission(submissions / name, answer)
    grades = tmp_path / "grades.csv"
    assert main(["grade-batch", "0", str(submissions), "--csv", str(grades), "--cap-s", "20"]) == 0
    rows = {row["student"]: row for row in csv.DictReader(grades.open())}
    reports = {name: json.loads((tmp_path / "grades" / f"{name}.json").read_text()) for name in rows}
    for name in ("flooding", "filling", "spinning"):
        assert int(rows[name]["score"]) <= int(rows["handout"]["score"]), (name, rows[name])
    problems = {name: report["problem"] or "" for name, report in reports.items()}
    assert "MB: the grader kept its first and last 512 KiB" in problems["flooding"], problems
    assert "the submission filled /tmp (512 MB), /grade/out (64 MB)" in problems["filling"], problems
    assert "did not finish within its 20 s cap" in reports["spinning"]["tests"][0]["message"], reports["spinning"]["tests"][0]
