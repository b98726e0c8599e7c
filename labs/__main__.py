"""The labs' command line (labs/README.md).

    python -m labs list
    python -m labs skeleton N --out DIR [--track python|p4] [--keep LABS]
    python -m labs grade N [--tree DIR] [--track ...] [--tests-from DIR] [--report FILE]
    python -m labs grade-batch N SUBMISSIONS --csv FILE [--track ...] [--tests-from DIR]
    python -m labs gradescope N --out ZIP [--track ...] [--tests-from DIR]
    python -m labs plot N [--results DIR ...] [--out DIR]

``grade`` exits 0 only with full marks, 1 below, 2 on bad input; SIGTERM, SIGHUP and SIGQUIT
stop it as Ctrl-C does, removing what it made (exit 128 + the signal's number). Run it from the tree's root
(or give --tree): the tree's code is what is graded, whichever checkout the grader is in.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from base.cli import setup_logging, user_error
from base.lifetime import STOP_SIGNALS
from base.yamlschema import ConfigError
from labs import catalog
from labs import gradebook
from labs.bundle import make_bundle
from labs.grade import (DEFAULT_MEMORY_MB, Grade, SubmissionError, clean_tree, default_report, expected_outputs, failed_grade, grade,
                        limits, place_submission, reference_tree, score_table, write_gradescope, write_report)  # fmt: skip
from labs.markers import MarkerError, Region
from labs.sandbox import SandboxError, check_can_sandbox
from labs.scratch import remove, scratch_folder
from labs.skeleton import SkeletonError, make_skeleton
from labs.text import shown
from switchml_testbed.release import add_version_option, program

log = logging.getLogger("labs")

def cmd_list(args: argparse.Namespace) -> int:
    for lab in catalog.all_labs():
        tracks = ", ".join(f"{name} ({track.points} points)" for name, track in lab.tracks.items())
        print(f"{lab.number}  {lab.title:<48} {lab.hours:>9}  {lab.folder.relative_to(catalog.LABS_DIR.parent)}/  {tracks}")
    return 0


def cmd_skeleton(args: argparse.Namespace) -> int:
    lab = catalog.by_number(args.lab)
    track = lab.track(args.track)
    source = catalog.LABS_DIR.parent
    numbers = [other.number for other in catalog.all_labs()]
    unknown = sorted((args.keep or frozenset()) - set(numbers))
    if unknown:
        raise SkeletonError(f"--keep {','.join(map(str, unknown))}: no such lab; there are labs {', '.join(map(str, numbers))}")
    handout = make_skeleton(source, args.out, lab, track, args.keep)
    venv = source / ".venv"
    if venv.is_dir() and not (args.out / ".venv").exists():
        (args.out / ".venv").symlink_to(venv)  # the same commands work in the skeleton: .venv/bin/python ...
        with (args.out / ".git" / "info" / "exclude").open("a") as exclude:
            exclude.write(".venv\n")  # .gitignore's ".venv/" matches the folder, not a link to it
    print(f"lab {lab.number} ({track.name} track) skeleton in {args.out}; write your code in:")
    for region in handout.student:
        print(f"  {region.where}  {region.hint}")
    others = [region for region in handout.stubbed if region.lab != lab.number or region.path not in track.files]
    print(f"answers it holds: {_by_lab(handout.kept)}; also stubbed: {_by_lab(others)}")
    print(f"then: cd {args.out} && .venv/bin/python -m labs grade {lab.number}" + (f" --track {track.name}" if args.track else ""))
    return 0


def _by_lab(regions: list[Region]) -> str:
    """'lab 0 (methods/switchml.py), lab 3 (hosts/switchml/timers.py)', or 'none'."""
    files: dict[int, set[str]] = {}
    for region in regions:
        files.setdefault(region.lab, set()).add(region.path)
    return ", ".join(f"lab {n} ({', '.join(sorted(paths))})" for n, paths in sorted(files.items())) or "none"


def _positive(value: str) -> int:
    """--cap-s's and --memory-mb's value: a whole number above 0."""
    if not value.isdigit() or int(value) == 0:
        raise argparse.ArgumentTypeError(f"{value!r}: a whole number above 0")
    return int(value)


def _keep(value: str) -> frozenset[int]:
    """--keep's value: lab numbers separated by commas, or 'none'."""
    if value == "none":
        return frozenset()
    try:
        return frozenset(int(part) for part in value.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: lab numbers separated by commas (0,1,2) or 'none'") from None


@contextlib.contextmanager
def _grader(args: argparse.Namespace) -> Iterator[Callable[[Path], Grade]]:
    """What grades one tree for ``args``: in place (a student's own tree), or with
    ``--tests-from``, its graded files on that checkout's clean tree, in the sandbox, its
    outputs compared with those the reference's code gives (computed once, first)."""
    lab = _graded_lab(args)
    track = lab.track(args.track)
    if args.tests_from is None:
        yield lambda tree: grade(lab, track, tree)
        return
    check_can_sandbox()
    caps = limits(lab, track, args.cap_s, args.memory_mb)
    with scratch_folder("labs-grade-") as scratch:
        base = clean_tree(args.tests_from, lab, track, scratch / "clean")
        expected = expected_outputs(lab, track, reference_tree(args.tests_from, base, track, scratch / "reference"), caps)

        def graded(submission: Path) -> Grade:
            tree = scratch / "submission"  # not submission.name: that is '' for --tree .
            try:
                problem = place_submission(base, submission, track, tree)
                return dataclasses.replace(grade(lab, track, tree, caps, problem, expected, base), tree=str(submission.resolve()))
            finally:
                remove(tree)

        yield graded


def _graded_lab(args: argparse.Namespace) -> catalog.Lab:
    """The lab as the tests' owner describes it: with --tests-from, that checkout's lab.yaml
    (which lists its hidden tests), else this one's."""
    return catalog.by_number(args.lab, args.tests_from / "labs" if args.tests_from else catalog.LABS_DIR)


def cmd_grade(args: argparse.Namespace) -> int:
    lab = _graded_lab(args)
    track = lab.track(args.track)
    with _grader(args) as graded:
        result = _grade_one(graded, lab, track, args.tree)
    report = args.report or default_report(args.tree, lab, track)
    write_report(result, report)
    print(score_table(lab, result))
    print(f"report: {report}")
    if args.gradescope:
        write_gradescope(lab, result, args.gradescope)
        print(f"Gradescope results: {args.gradescope}")
    return 0 if result.full_marks else 1


def cmd_grade_batch(args: argparse.Namespace) -> int:
    submissions = sorted(path for path in args.submissions.iterdir() if path.is_dir())
    if not submissions:
        raise ConfigError(f"{args.submissions}: no submission folders in it")
    lab = _graded_lab(args)
    track = lab.track(args.track)
    reports = args.csv.with_suffix("")
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with _grader(args) as graded, gradebook.Writers(args.csv, lab, track, args.lms) as books:
        for tree in submissions:
            student = shown(tree.name)
            result = _grade_one(graded, lab, track, tree)
            write_report(result, reports / f"{tree.name}.json", student=student)
            books.write(student, result)
            print(f"{student}: {result.score}/{result.max_score}" + (f" ({shown(result.problem)})" if result.problem else ""), flush=True)
    print(f"{len(submissions)} submission(s) graded: {', '.join(map(str, books.paths))}; one JSON report each in {reports}/")
    return 0


def _grade_one(graded: Callable[[Path], Grade], lab: catalog.Lab, track: catalog.Track, tree: Path) -> Grade:
    """``tree``'s grade, or, when grading it fails in any way (the grader's fault or the
    submission's), a 0 that says why: one submission never stops the class's grading."""
    try:
        return graded(tree)
    except (KeyboardInterrupt, SystemExit):
        raise
    except Exception as error:  # noqa: BLE001 -- any failure of one submission is its 0, with the reason
        log.exception("grading %s failed", shown(tree.name))
        return failed_grade(lab, track, tree, f"the grader could not grade this submission: {type(error).__name__}: {error}")


def cmd_gradescope(args: argparse.Namespace) -> int:
    lab = _graded_lab(args)
    track = lab.track(args.track)
    names = make_bundle(args.tests_from, lab, track, args.out)
    print(f"{args.out}: Gradescope's autograder for lab {lab.number} ({track.name} track), {len(names)} files of"
          f" {args.tests_from}'s last commit with setup.sh and run_autograder; upload it as the assignment's autograder")  # fmt: skip
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from analysis.load import ResultsFormatError  # matplotlib and pandas only for this command
    from analysis.tables import MissingData
    from labs.plot import PlotError, plot

    lab = catalog.by_number(args.lab)
    try:
        written = plot(lab, args.results, args.out)
    except (PlotError, MissingData, ResultsFormatError) as error:
        return user_error(log, error)
    for path in written:
        print(path)
    return 0 if written else 1


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=program("python -m labs"), description="SwitchML classroom labs: skeletons, grading, plots")
    add_version_option(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the labs, their time and points").set_defaults(run=cmd_list)

    def lab_command(name: str, help_: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_)
        sub.add_argument("lab", type=int, help="lab number (python -m labs list)")
        return sub

    def track_option(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--track", choices=["python", "p4"], help="python (embedded switch, default) or p4 (bmv2)")

    def cap_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("--cap-s", type=_positive, help="wall-clock cap on one submission's grade with --tests-from"
                                                         " (default: lab.yaml's cap_s, else its tests' timeouts)")
        sub.add_argument("--memory-mb", type=_positive, help="memory cap on a submission's grade with --tests-from, all its"
                                                             f" processes together (default {DEFAULT_MEMORY_MB})")

    sub = lab_command("skeleton", "copy this repository with the lab's regions replaced by stubs")
    sub.add_argument("--out", type=Path, required=True, help="new or empty folder for the student's tree")
    sub.add_argument("--keep", type=_keep, help="the other labs whose answers it holds: 0,1 or none (default: the earlier labs')")
    track_option(sub)
    sub.set_defaults(run=cmd_skeleton)

    sub = lab_command("grade", "run the lab's graded tests in a tree, print the score, write a JSON report")
    sub.add_argument("--tree", type=Path, default=Path.cwd(), help="the tree to grade (default: the current folder)")
    sub.add_argument("--tests-from", type=Path, help="grade as an instructor: the tree's graded files on this checkout's clean"
                                                     " tree (hidden tests), in the sandbox (root only)")
    sub.add_argument("--report", type=Path, help="JSON report (default: TREE/results/labs/labN-TRACK.json)")
    sub.add_argument("--gradescope", type=Path, metavar="RESULTS_JSON",
                     help="also write Gradescope's results.json here (/autograder/results/results.json in its autograder)")
    track_option(sub)
    cap_options(sub)
    sub.set_defaults(run=cmd_grade)

    sub = lab_command("grade-batch", "grade every submission folder in a folder, one CSV row each")
    sub.add_argument("submissions", type=Path, help="a folder with one tree per student")
    sub.add_argument("--csv", type=Path, required=True, help="the grades; JSON reports go to a folder of the same name")
    sub.add_argument("--tests-from", type=Path, default=catalog.LABS_DIR.parent,
                     help="whose clean tree and tests grade the submissions (default: this checkout, not the students')")  # fmt: skip
    sub.add_argument("--lms", choices=sorted(gradebook.LMS), action="append", default=[],
                     help="also write the gradebook import of this LMS beside the CSV (repeat for both)")
    track_option(sub)
    cap_options(sub)
    sub.set_defaults(run=cmd_grade_batch)

    sub = lab_command("gradescope", "make the autograder zip a course uploads to Gradescope for this lab")
    sub.add_argument("--out", type=Path, required=True, help="the zip to write")
    sub.add_argument("--tests-from", type=Path, default=catalog.LABS_DIR.parent,
                     help="the course's fork whose last commit the autograder holds (default: this checkout)")
    track_option(sub)
    sub.set_defaults(run=cmd_gradescope)

    sub = lab_command("plot", "draw the lab's figures from your runs")
    sub.add_argument("--results", type=Path, nargs="+", default=[], help="your run folders (or their parents)")
    sub.add_argument("--out", type=Path, default=Path("results/labs/figures"), help="where the PNG, PDF and CSV go")
    sub.set_defaults(run=cmd_plot)

    args = parser.parse_args(argv)
    setup_logging()
    try:
        return args.run(args)
    except (ConfigError, SkeletonError, MarkerError, SandboxError, SubmissionError, FileNotFoundError) as error:
        return user_error(log, error)


if __name__ == "__main__":
    for stop in STOP_SIGNALS[1:]:  # like Ctrl-C: the grade's sandboxes and temporary trees are removed
        signal.signal(stop, _stopped)
    sys.exit(main())
