#!/usr/bin/env python3
"""Run a SwitchML testbed experiment (or sweep) described by a YAML config.

    run_experiment.py CONFIG [--switch auto|bmv2|ebpf|embedded] [--out DIR] [--set key=value]...
                             [--resume RUN_DIR] [--simulate] [--dry-run] [-v]
    run_experiment.py [CONFIG] --calibrate quick|full [--switch ...] [--set key=value]... [--dry-run]

Results land in results/<config name>/<UTC timestamp>/ (see docs/results-format.md).
--calibrate measures the link rates the config's switch targets (auto: every one this machine
runs) keep up with at its k and worker counts on this machine (default config:
configs/8workers.yaml), and writes them to results/calibration.yaml, which
`topology.link.bw_mbps: target` then uses (docs/targets.md).
The exit status is 0 only when every worker's result of every repetition verified.
Needs root (Mininet), except with --simulate: the same config on a simulated clock (simulation/). Ctrl-C, SIGTERM, a closed terminal (SIGHUP) or SIGQUIT stops the run
and tears the network down (a second one waits for the teardown). Exit status: 0 verified, 1 not verified, 2 bad input, 3 run
failed, 4 results could not be written (disk full, read-only), 130 interrupted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import traceback

# Running as a script from anywhere: make the repository's packages importable.
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))

from base.cli import EXIT_BAD_INPUT, setup_logging, user_error  # noqa: E402
from base.lifetime import STOP_SIGNALS  # noqa: E402

EXIT_OK, EXIT_NOT_VERIFIED, EXIT_FAILED, EXIT_STORAGE, EXIT_UNWRITTEN, EXIT_INTERRUPTED = 0, 1, 3, 4, 5, 130
EXIT_CONFIG = EXIT_BAD_INPUT


STOPPED_BEFORE_START: list[int] = []
"""The stop signals ``exit_before_start`` took."""


def exit_before_start(signum: int, frame: object) -> None:
    """A stop signal before the run has started anything (while Python imports, the config
    loads, the target is chosen): the interrupted status, in one line. SystemExit, not
    KeyboardInterrupt: it unwinds through whatever runs (a probe's clean-up still runs),
    and the interpreter prints no traceback for it. ``run`` replaces this handler before it
    builds anything (``stop_on_first_signal``). The signal is also remembered, for
    ``exit_if_stopped_before_start``."""
    if not STOPPED_BEFORE_START:
        logging.getLogger("run_experiment").error("interrupted (signal %d) before the run started; nothing was built", signum)
    STOPPED_BEFORE_START.append(signum)
    raise SystemExit(EXIT_INTERRUPTED)


def exit_if_stopped_before_start() -> None:
    """Stop, before anything is written or built, when a stop signal came earlier but its
    SystemExit was swallowed: raised inside a callback whose exceptions Python ignores
    ("Exception ignored in: <function _get_module_lock.<locals>.cb>", an import's lock),
    it left the start-up running (CI saw a run that then went on to verify)."""
    if STOPPED_BEFORE_START:
        raise SystemExit(EXIT_INTERRUPTED)


if __name__ == "__main__":  # first, so that a Ctrl-C during the imports below is no traceback
    for _stopping in STOP_SIGNALS:
        signal.signal(_stopping, exit_before_start)

import argparse  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from tqdm import tqdm  # noqa: E402

try:
    import mininet.log  # noqa: F401  (before any of our loggers exist: see below)
except ModuleNotFoundError:  # an install for the simulated clock only (docs/install.md); an emulated run says so
    MININET = False
else:
    MININET = True
# mininet.log makes its own logger class the default, so every logger created after it
# would print each message a second time through its private handler.
logging.setLoggerClass(logging.Logger)

from experiments.calibration.measure import MODES  # noqa: E402
from experiments.capacity import CONFIG as PROBED_CONFIG, Probe  # noqa: E402
from experiments.config import TARGET_RATE_SOURCES, Experiment, check_data_paths, check_emulable, shipped_or_given  # noqa: E402
from base.yamlschema import ConfigError, read_yaml_text  # noqa: E402
from methods import aggregations_of  # noqa: E402
from protocol.params import REPO_ROOT, RESULTS_DIR  # noqa: E402
from switches.targets import TARGETS, TargetUnavailableError, resolve_target, root_run_targets  # noqa: E402
from switchml_testbed.release import add_version_option, program  # noqa: E402

log = logging.getLogger("run_experiment")

NO_MININET = ("Mininet is not installed, and an emulated run needs it: run scripts/bootstrap.sh as root, or apt install mininet "
              "and make the venv see the system's packages (docs/install.md); --simulate runs without it")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=program("run_experiment.py"), description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_version_option(parser)
    parser.add_argument("config", type=Path, nargs="?",
                        help="experiment config (YAML), e.g. configs/8workers.yaml; - reads it from standard input")
    parser.add_argument("--switch", choices=TARGETS, help="switch target (overrides switch.target)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--out", type=Path, help="results directory, new or empty (default results/<name>/<UTC timestamp>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set topology.workers=4 (repeatable)")
    where.add_argument("--resume", type=Path, metavar="RUN_DIR", help="continue an interrupted run in RUN_DIR, skipping finished points")
    parser.add_argument("--simulate", action="store_true",
                        help="run on the simulated clock (simulation/: the worker's and the switch's own code, no Mininet, no root); "
                             "times are simulated seconds")
    parser.add_argument("--dry-run", action="store_true", help="validate the config, print the points, run nothing")
    parser.add_argument("--calibrate", choices=tuple(MODES),
                        help="measure the link rates this machine keeps up with for the config (default configs/8workers.yaml) "
                             "and write them to results/calibration.yaml for bw_mbps: target; quick: its k and most workers, "
                             "minutes; full: every k and worker count, precise, an hour or more")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.calibrate is not None:
        clashing = [flag for flag, given in (("--out", args.out), ("--resume", args.resume), ("--simulate", args.simulate)) if given]
        if clashing:
            parser.error(f"--calibrate writes the calibration file, not a run: {', '.join(clashing)} does not apply")
        args.config = args.config or PROBED_CONFIG
    elif args.config is None:
        parser.error("the following arguments are required: config")
    return args


def describe(experiment: Experiment, target: str) -> str:
    rates = sorted({l.spec.bw_mbps for l in experiment.points[0].topology.links if l.spec.bw_mbps is not None})
    rate_text = f"{rates[0]:g} Mbit/s links" if rates else "unshaped links"
    lines = [f"experiment {experiment.name} ({experiment.source}), switch target: {target}, "
             f"{rate_text} (from {experiment.link_rate_source})"]
    for protocol in aggregations_of([m for p in experiment.points for m in p.methods]):
        if protocol.data_path is not None:
            paths = sorted({p.data_path_of(protocol).reason for p in experiment.points if protocol in aggregations_of(p.methods)})
            lines.append(f"  {protocol.label} worker: {'; '.join(paths)}")
    for p in experiment.points:
        sweep = f" {p.sweep_param}={p.sweep_value!r}" if p.sweep_param else ""
        info = p.workload_info
        lines.append(
            f"  point {p.index}{sweep}: {len(p.topology.hosts)} workers ({p.topology.kind}), {info.elements} x {p.workload['dtype']} "
            f"({info.name}), k={p.job.k}, pool={p.job.pool_size}, methods={','.join(p.methods)}, "
            f"repetitions={p.repetitions}, deadlines: {', '.join(f'{m} {p.job_limit(m).seconds:.3g} s' for m in p.methods)}"
        )
    return "\n".join(lines)


def emit(text: str) -> bool:
    """Print ``text`` on stdout; False when stdout cannot take it (a full device), which is
    then logged in one line. A reader that went away (``| head -1``) is no failure: it chose
    to read no further, and the run's status stands. Either way stdout is pointed at
    /dev/null afterwards, so that nothing written later, nor the flush at exit, fails again."""
    try:
        print(text, flush=True)
        return True
    except BrokenPipeError:
        written = True
    except OSError as exc:
        log.error("cannot write to standard output: %s", exc.strerror)
        written = False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return written


def stop_on_first_signal() -> None:
    """SIGINT (Ctrl-C), SIGTERM, SIGHUP (the terminal closed) and SIGQUIT stop the run once:
    the first raises KeyboardInterrupt, which tears the network down on its way out; later
    ones only say that this is under way, since interrupting a teardown would leak
    namespaces, veths and processes."""

    def stop(signum: int, frame: object) -> None:
        for stopping in STOP_SIGNALS:
            signal.signal(stopping, already_stopping)
        raise KeyboardInterrupt(f"signal {signum}")

    def already_stopping(signum: int, frame: object) -> None:
        log.warning("signal %d: already stopping, the network is being torn down (kill -9 %d abandons the teardown; "
                    "the next run or python -m network.cleanup removes what is left)", signum, os.getpid())

    for stopping in STOP_SIGNALS:
        signal.signal(stopping, stop)


def needs_delay_line(experiment: Experiment) -> bool | None:
    """Whether 'auto' must pick the embedded switch: some link has a delay and the kernel has
    no netem (probed only then: the probe creates a namespace, which needs root); None when
    it cannot tell (not root: a dry run)."""
    if experiment.data["switch"]["target"] != "auto" or not any(
        link.spec.delay_ms for point in experiment.points for link in point.topology.links
    ):
        return False
    from network.shaping import ShapingError, probe_tc

    try:
        return not probe_tc().netem
    except ShapingError:
        return None


def main(argv: list[str] | None = None) -> int:
    """The command; a lab handout's function that is still a stub (labs/skeleton.py: it raises
    NotImplementedError("Lab n: ...")) is named in one line, not a traceback."""
    try:
        return run_command(argv)
    except NotImplementedError as exc:
        if not str(exc).startswith("Lab "):
            raise
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        where = Path(frame.filename).resolve()
        shown = where.relative_to(REPO_ROOT) if where.is_relative_to(REPO_ROOT) else where
        log.error("%s:%d: %s() is still to be written (%s); this tree is a lab handout: write it, then run again (labs/README.md)",
                  shown, frame.lineno, frame.name, exc)
        return EXIT_UNWRITTEN


def run_command(argv: list[str] | None) -> int:
    exit_if_stopped_before_start()  # the imports are done
    args = parse_args(argv)
    setup_logging(args.verbose)
    overrides = list(args.overrides) + ([f"switch.target={args.switch}"] if args.switch else [])
    try:
        from experiments.kinds import load

        args.config = shipped_or_given(args.config)
        text = read_yaml_text(args.config)  # once: a pipe or standard input reads empty the second time
        experiment = load(args.config, overrides, text, dry_run=args.dry_run)  # and its kind's rules
    except ConfigError as exc:
        return user_error(log, exc)

    if args.simulate:
        return simulate_command(experiment, args)
    if args.calibrate:
        return calibrate_command(experiment, args)
    requested = experiment.data["switch"]["target"]
    try:
        check_emulable(experiment)
        # A dry run need not be root; where only root can tell which target a run gets, it
        # shows each one it might be (root_run_targets) rather than the one it can check.
        # (A run that cannot probe netem is not root, and stops at that below.)
        choose = root_run_targets if args.dry_run else lambda name, needs_delay_line: [resolve_target(name, bool(needs_delay_line))]
        # 'auto' resolved: the config as loaded, on the concrete target, so its checks and its
        # link rate (switch.link_bw_mbps, its link_rates) apply and config.yaml records what ran.
        runs = [(target, experiment if target == requested else experiment.with_target(target))
                for target in choose(requested, needs_delay_line=needs_delay_line(experiment))]
        for _, loaded in runs:
            check_data_paths(loaded)  # the native loop built (cached) here, not as the config loads
        if not args.dry_run:  # the servers of a cluster are asked which worker loop they run (a dry run connects nowhere)
            if not MININET:
                raise ConfigError(NO_MININET)
            from experiments.data_path import on_every_server

            runs = [(target, on_every_server(loaded)) for target, loaded in runs]
        else:
            check_destination(args, [loaded for _, loaded in runs])
    except (TargetUnavailableError, ConfigError) as exc:
        return user_error(log, exc)
    if len(runs) > 1 and not emit(f"switch target {requested}: a root run takes the first of {', '.join(t for t, _ in runs)} "
                                  "that this machine takes; only root can find out which, so this dry run shows each:"):
        return EXIT_STORAGE
    if not all(emit(describe(loaded, target)) for target, loaded in runs):
        return EXIT_STORAGE
    exit_if_stopped_before_start()  # the config loaded, the target chosen
    if args.dry_run:
        lacking = "".join(f"\na run needs what this machine lacks: {line}" for line in experiment.unavailable)
        return EXIT_OK if not lacking or emit(lacking.lstrip("\n")) else EXIT_STORAGE
    [(target, experiment)] = runs
    if os.geteuid() != 0:
        return user_error(log, "Mininet needs root: run with sudo (or as root)")

    return run_reported(experiment, target, args)


def check_destination(args: argparse.Namespace, candidates: list[Experiment]) -> None:
    """For --dry-run: ConfigError where the run would refuse its results folder, without
    creating it: an --out it cannot claim, or a --resume folder that is no unfinished run of
    this config on this clock (of one of ``candidates``, the configs 'auto' might run)."""
    from experiments.run_dir import check_out_dir, check_resumable

    if args.out is not None:
        check_out_dir(args.out)
    if args.resume is None:
        return
    refusals = []
    for experiment in candidates:
        try:
            return check_resumable(args.resume, experiment, simulated=args.simulate)
        except ConfigError as exc:
            refusals.append(exc)
    raise refusals[0]


def run_reported(experiment: Experiment, target: str, args: argparse.Namespace) -> int:
    """``run``, with a server unfit for the run (a ConfigError) and a results folder that
    cannot be written each given its own exit status and one line, emulated or simulated."""
    from experiments.storage import storage_problem

    try:
        return run(experiment, target, args)
    except ConfigError as exc:
        return user_error(log, exc)
    except Exception as exc:
        results = args.resume or args.out or RESULTS_DIR / experiment.name
        problem = storage_problem(exc, results)
        if problem is None:
            raise
        log.error("cannot write the results in %s: %s", results, problem)
        return EXIT_STORAGE


def simulate_command(experiment: Experiment, args: argparse.Namespace) -> int:
    """``--simulate``: the config on a target with a simulated data plane, checked for what
    the simulator runs (one line naming what it lacks otherwise), then run like any other."""
    from experiments.kinds import kind_of
    from experiments.simulated import check_simulable, simulated_target
    from simulation.network import SimulationUnsupported
    from switches.targets import simulated_data_plane

    requested = experiment.data["switch"]["target"]
    try:
        target = simulated_target(requested, needs_delay_line(experiment))
        loaded = experiment if target == requested else experiment.with_target(target)
        kind = kind_of(loaded)
        if kind.emulated_only:
            raise SimulationUnsupported(f"--simulate: {kind.name} experiments run PyTorch processes on the hosts, which the simulated "
                                        "clock does not model; run them emulated (without --simulate)")
        loaded = check_simulable(loaded)
        if args.dry_run:
            check_destination(args, [loaded])
    except (SimulationUnsupported, ConfigError) as exc:
        return user_error(log, exc)
    plane = simulated_data_plane(target).name
    simulated = f"{target}'s own data plane" if plane == target else f"{target}'s data-plane contract by {plane}'s simulated pipeline"
    workers = " and ".join(f"the {protocol.label} worker's core" for protocol in aggregations_of([m for p in loaded.points for m in p.methods]))
    if not emit(f"{describe(loaded, target)}\n  simulated: {simulated}{f' and {workers}' if workers else ''} on a simulated clock"):
        return EXIT_STORAGE
    if args.dry_run:
        return EXIT_OK
    return run_reported(loaded, target, args)


def calibrate_command(experiment: Experiment, args: argparse.Namespace) -> int:
    """``--calibrate``: the searches the config asks for, one after another, each merged into
    the calibration file as it ends (experiments/calibration/)."""
    from experiments.calibration import measure, record
    from experiments.results import utc_stamp

    mode = MODES[args.calibrate]
    path = record.calibration_file()
    try:
        if path is None:
            raise ConfigError(f"--calibrate: {record.FILE_VARIABLE} is set empty (no calibration file); set it to the file to write")
        if path.is_file():
            record.read(path)  # a damaged file is named now, not after the first search
        requested = experiment.data["switch"]["target"]
        targets = measure.targets_of(experiment) if requested == "auto" else [resolve_target(requested)]
        searches = measure.plan(experiment, mode, targets)
        if not searches:
            raise ConfigError(f"--calibrate: none of {', '.join(targets) or 'the targets'} builds the config's k")
    except (TargetUnavailableError, ConfigError) as exc:
        log.error("%s", exc)
        return EXIT_CONFIG
    if not experiment.link_rate_source.startswith(TARGET_RATE_SOURCES):
        log.warning("%s runs at a rate of its own (%s) and will not use the calibration; configs with topology.link.bw_mbps: "
                    "target will", experiment.source, experiment.link_rate_source)
    runs = measure.most_runs(searches, mode)
    lines = [f"calibration ({mode.name}) of {experiment.source} into {path}: {len(searches)} search{'es' * (len(searches) != 1)}, "
             f"at most {runs} probe runs "
             f"(each a run of {mode.settings.repetitions} x {mode.settings.seconds:g} s of line-rate data, after Mininet starts)"]
    lines += [f"  {search}" for search in searches]
    if not emit("\n".join(lines)):
        return EXIT_STORAGE
    if args.dry_run:
        return EXIT_OK
    if os.geteuid() != 0:
        log.error("the probes start Mininet: run --calibrate with sudo (or as root)")
        return EXIT_CONFIG
    load, cores = os.getloadavg()[0], os.cpu_count() or 1
    if load >= cores / 2:
        log.warning("the machine is busy with other work (load average %.1f on %d cores): rates measured now are lower than "
                    "it keeps up with when quiet", load, cores)
    stop_on_first_signal()
    runs_dir = path.with_suffix("") / utc_stamp()
    measured: list[dict[str, Any]] = []
    with tqdm(total=runs, desc=f"calibration ({mode.name})", unit="probe", file=sys.stderr, disable=None) as bar:
        def probed(probe: Probe) -> None:
            bar.update(1)
            log.info("%s", probe.describe())

        try:
            measure.calibrate(searches, mode, path, runs_dir, probed, bar.set_postfix_str, measured.append)
        except KeyboardInterrupt:
            log.error("interrupted; %d of %d searches were written to %s; probes in %s", len(measured), len(searches), path, runs_dir)
            return EXIT_INTERRUPTED
        except RuntimeError as exc:  # a probe that wrote no results or hung: its log says why
            log.error("%s; %d of %d searches were written to %s", exc, len(measured), len(searches), path)
            return EXIT_FAILED
        except OSError as exc:
            log.error("cannot write the calibration to %s: %s", path, exc.strerror or exc)
            return EXIT_STORAGE
        bar.total = bar.n  # the searches ended before the most they could take
    rows = [f"  {e['target']}, k = {e['k']}, {e['workers']} workers: "
            + (f"kept up at up to {e['capacity_mbps']:g} Mbit/s, rate {e['rate_mbps']:g} Mbit/s" if e["rate_mbps"] is not None
               else "kept up at none of the rates tried")
            + f" ({len(e['probes'])} probes, load average {e['load_before'][0]:g} at the start)" for e in measured]
    if not emit("\n".join([f"calibrated (margin {measure.MARGIN:.0%}); written to {path}, probes in {runs_dir}:", *rows])):
        return EXIT_STORAGE
    return EXIT_OK


def run(experiment: Experiment, target: str, args: argparse.Namespace) -> int:
    """Run into a new results folder (or the resumed one); failures that are the disk's
    propagate to main, which gives them their own exit status."""
    from experiments.kinds import kind_of
    from experiments.results import utc_stamp
    from experiments.run_dir import check_resumable, claim_out_dir, new_run_dir
    from experiments.storage import storage_problem
    from protocol.results_format import resume_command
    from experiments.workers import WorkerFailure
    from base.lifetime import DependencyFailed
    from network.lock import WaitInterrupted
    from network.lock import held as held_network
    from switches.target import DataPlaneStartError
    from experiments.harness import clock_of
    from experiments.simulated import SimulationFailed

    told_failures: tuple[type[Exception], ...] = (WorkerFailure, DependencyFailed, DataPlaneStartError, SimulationFailed)
    if not args.simulate:  # Mininet's network (a simulated run needs no Mininet installed)
        from network.cluster import ClusterError
        from network.emulation import NetworkError

        told_failures += (NetworkError, ClusterError)  # a server: "server srv2: copying ... there failed: ..."
    exit_if_stopped_before_start()  # the run's own imports are done; nothing is written yet
    if args.resume:
        check_resumable(args.resume, experiment, simulated=args.simulate)
        run_dir = args.resume
    elif args.out:
        run_dir = claim_out_dir(args.out)
    else:
        run_dir = new_run_dir(RESULTS_DIR / experiment.name, utc_stamp())
    run_dir = run_dir.absolute()  # the switch and worker processes run in the tree's folder, not necessarily this one
    kind = kind_of(experiment)
    clock = clock_of(experiment, target, args.simulate)
    writer = kind.writer(run_dir, experiment, target)
    clock.begin(writer)
    stop_on_first_signal()
    with tqdm(total=kind.units(experiment), desc=experiment.name, unit=kind.unit, file=sys.stderr, disable=None) as bar:
        runner = kind.runner(experiment, clock, writer, lambda what: (bar.set_postfix_str(what), bar.update(1)))
        try:
            # Every emulated point's network nests in the lock: a sweep's points follow one another. A
            # simulated run builds no network (no namespace, no veth), so it neither takes nor waits for it.
            with contextlib.nullcontext() if args.simulate else held_network():
                verified = runner.run()
        except KeyboardInterrupt as interrupt:
            for stopping in STOP_SIGNALS:  # torn down: a late one must not kill the exit itself
                signal.signal(stopping, signal.SIG_IGN)
            if isinstance(interrupt, WaitInterrupted):  # no network of this point was built
                log.error("%s; results so far in %s (continue with %s)", interrupt, run_dir, resume_command(run_dir, args.simulate))
            else:
                log.error("interrupted; network torn down; partial results in %s (continue with %s)", run_dir, resume_command(run_dir, args.simulate))
            return EXIT_INTERRUPTED
        except Exception as exc:
            if isinstance(exc, ConfigError) or storage_problem(exc, run_dir) is not None:  # a server unfit for the run: one line, exit 2
                raise
            if isinstance(exc, told_failures):  # says what failed; no traceback needed
                log.error("run failed (network torn down; logs in %s): %s", writer.log_dir, exc)
            else:
                log.exception("run failed; network torn down; logs in %s", writer.log_dir)
            return EXIT_FAILED
    summary = writer.finalize(verified)
    if not emit(f"{kind.report(summary)}\nverified: {json.dumps(summary['verified'])}; results in {run_dir}"):
        return EXIT_STORAGE
    return EXIT_OK if summary["verified"] else EXIT_NOT_VERIFIED


if __name__ == "__main__":
    sys.exit(main())
