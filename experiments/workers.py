"""Running one method's worker processes on the emulated hosts, in lock step.

``WorkerGroup`` starts ``python -m hosts.worker`` on every host (inside its namespace),
waits for all of them to report ready, then releases each repetition to all ranks at
once and collects their reports -- every wait bounded, so a crashed or hung worker
becomes a ``WorkerFailure`` naming the rank and quoting its log, never a hang. Leaving
the context kills whatever is still running.

The group also watches the processes the workers depend on but did not start (the
switches, the hosts' shells, bmv2's learning thread): each is a pidfd (a thread's watch) in the same selector as the workers' pipes, so a switch that
dies wakes the wait at once and fails the run naming it and its exit status, instead of
every worker waiting out its time limit. When a deadline passes, the rank that reports
the timeout first is seldom the cause: every rank of a collective waits for the slowest.
A worker or dependency that is stopped (SIGSTOP, state T) made no progress at all, so the
failure names it instead. Workers are started with a parent-death signal:
if the runner is killed, they die with it rather than keep the hosts' namespaces alive.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence

from base.lifetime import (
    EXIT_NOTICE_S, STOPPED_STATES, Dependencies, Dependency, DependencyStopped, deferred_signals, dies_with_this_process, exited_error,
    process_state, stat_state, stopped_evidence,
)
from experiments.limits import Limit
from protocol.params import REPO_ROOT
from protocol.worker_spec import STACKS_SIGNAL, WorkerSpec

if TYPE_CHECKING:  # Mininet's, which --simulate runs without
    from mininet.node import Host
# network.cluster (built on Mininet's classes) is imported in the methods that use it, for the same reason.

log = logging.getLogger(__name__)

WORKER_ENTRY = "hosts.worker"
"""The module every rank runs (``python -m hosts.worker SPEC --rank R``); its spec names the
workload's host loop."""
LOG_TAIL_LINES = 15
RESULT_FILES = ("result", "int_sum", "buckets", "parameters", "sums")
"""The keys of a worker's report that name a file the worker wrote for the runner (fetched
from a host on another server as the report arrives): an all-reduce's result and integer
sum (hosts/worker.py, hosts/training.py); a DDP rank's bucket gradients, parameters and
bucket sums (hosts/torch_training.py, hosts/ddp_script.py)."""
STACKS_WAIT_S = 1.0
"""How long a rank that did not exit is given to write its threads' stacks to its log."""
REPORT_GRACE_S = 10.0
"""How much longer than a worker's own deadline the runner waits for its report: the worker
reports a missed deadline itself, with details, unless it is hung. A worker that is stopped
(SIGSTOP) cannot report anything: the run fails at the deadline itself, naming it."""


def log_tail(log_path: Path) -> list[str]:
    """The last LOG_TAIL_LINES lines of a rank's log. Its bytes are the rank's own (a script's
    print of binary data, a library's message in another encoding): those that are not UTF-8
    are shown escaped (``\\xff``), so that the report still names the rank and its error."""
    try:
        return log_path.read_bytes().decode(errors="backslashreplace").splitlines()[-LOG_TAIL_LINES:]
    except OSError as exc:
        return [f"(cannot read it: {exc.strerror})"]


class WorkerFailure(RuntimeError):
    """A worker exited, reported an error, or did not answer in time."""


class WorkerGroup:
    """One process per rank; ranks are the positions in ``hosts``.

    ``dependencies`` maps what a process is (``switch s1``, ``the shell of host h3``) to the
    pid of a child process of this one that must stay up while the workers run (or what a
    thread is to its watch: base.lifetime).
    """

    def __init__(self, method: str, hosts: Sequence[Host], spec_path: Path, log_dir: Path, exit_limit: Limit,
                 dependencies: Mapping[str, Dependency] | None = None,
                 remote_shells: Mapping[str, tuple[str, Callable[[str], str]]] | None = None,
                 waited_for: Callable[[], Mapping[str, str]] | None = None,
                 switch_problems: Callable[[], Sequence[str]] | None = None) -> None:
        self.method = method
        self.exit_limit = exit_limit
        """How long the ranks have to exit once told (``finish``)."""
        self.remote_shells = dict(remote_shells or {})
        """Host name -> (its server, what runs a shell command there), for hosts on another
        server (a rank's /proc there says whether it is stopped)."""
        self._switch_problems = switch_problems
        """What is wrong with a running switch (EmulatedNetwork.switch_problems), asked at a
        deadline before ``waited_for``: a switch detached from its ports freezes its slots,
        which then seem to wait for a rank."""
        self._waited_for = waited_for
        """Host name -> what the network shows the others wait for it (EmulatedNetwork.waited_for),
        asked when a deadline passes with no process stopped."""
        self.hosts = list(hosts)
        self.spec_path = spec_path
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[str]] = []
        self.pids_on_servers: list[int] = []
        """Each rank's pid on the server its host runs on, from its 'ready' (a rank on another
        server is this process's child only as an ssh client)."""
        self._buffers: dict[int, str] = {}
        self._selector = selectors.DefaultSelector()
        self._dependencies = Dependencies(dependencies or {})
        for pidfd, what in self._dependencies.fds.items():
            self._selector.register(pidfd, selectors.EVENT_READ, what)

    def __enter__(self) -> "WorkerGroup":
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def _log_path(self, rank: int) -> Path:
        return self.log_dir / f"{self.spec_path.stem}-rank{rank}.log"

    def start(self, limit: Limit) -> None:
        from network.cluster import ship

        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "PYTHONUNBUFFERED": "1"}
        spec = WorkerSpec.read(self.spec_path)
        for rank, host in enumerate(self.hosts):
            ship(host, [self.spec_path, *spec.files_read(rank)])
            with self._log_path(rank).open("w") as stderr:
                proc = host.popen(
                    [sys.executable, "-m", WORKER_ENTRY, str(self.spec_path), "--rank", str(rank)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, cwd=str(REPO_ROOT), env=env, text=True,
                    preexec_fn=dies_with_this_process(),
                )
            os.set_blocking(proc.stdout.fileno(), False)
            self._selector.register(proc.stdout, selectors.EVENT_READ, rank)
            self._buffers[rank] = ""
            self.procs.append(proc)
        self.pids_on_servers = [report["pid"] for report in self.collect("ready", limit)]

    def release(self, repetition: int) -> None:
        """Let every rank start repetition ``repetition`` (as close to together as pipes allow)."""
        self._send(f"go {repetition}")

    def _send(self, line: str) -> None:
        for rank, proc in enumerate(self.procs):
            try:
                proc.stdin.write(line + "\n")
                proc.stdin.flush()
            except BrokenPipeError:
                raise self._failure(rank, "exited before it could be told to start") from None

    def collect(self, event: str, limit: Limit, grace_s: float = 0.0) -> list[dict[str, Any]]:
        """Wait up to ``limit`` (+ ``grace_s``) for one ``event`` report from every rank; fail
        fast on any error or exit, of a worker or of a dependency."""
        from network.cluster import fetch

        reports: dict[int, dict[str, Any]] = {}
        timeout_s = limit.seconds + grace_s
        limit_at = time.monotonic() + limit.seconds
        deadline = limit_at + grace_s
        while len(reports) < len(self.procs):
            now = time.monotonic()
            missing = sorted(set(range(len(self.procs))) - set(reports))
            if now >= limit_at:  # a stopped process will not report within any grace
                self._raise_if_stopped(missing, f"no '{event}' from ranks {missing} within {limit.describe()}")
            if now >= deadline:
                raise self._failure(missing[0], f"no '{event}' within {timeout_s:g} s (ranks waiting: {missing}; {limit.describe()})")
            for key, _ in self._selector.select(timeout=min(deadline - now, 0.5)):
                if isinstance(key.data, tuple):
                    raise exited_error(*key.data)
                rank = key.data
                chunk = key.fileobj.read()
                if not chunk:
                    self._selector.unregister(key.fileobj)
                    if rank not in reports:
                        self.procs[rank].wait(timeout=5)
                        raise self._failure(rank, f"exited with status {self.procs[rank].returncode} before '{event}'")
                    continue
                self._buffers[rank] += chunk
                *lines, self._buffers[rank] = self._buffers[rank].split("\n")
                for line in lines:
                    report = json.loads(line)
                    if report["event"] == "error" and report.get("timed_out"):
                        timed_out = (f"rank {rank} on {self.hosts[rank].name} did not finish the all-reduce within "
                                     f"{limit.describe()}")
                        self._raise_if_stopped(sorted(set(range(len(self.procs))) - set(reports) - {rank}), timed_out)
                        raise WorkerFailure(f"{self.method}: {timed_out}; worker log {self._log_path(rank)}")
                    if report["event"] == "error":
                        raise self._reported_failure(rank, report)
                    if report["event"] != event:
                        raise self._failure(rank, f"sent '{report['event']}' while the runner waited for '{event}'")
                    fetch(self.hosts[rank], [Path(report[key]) for key in RESULT_FILES if key in report])
                    reports[rank] = report
        return [reports[r] for r in range(len(self.procs))]

    def _reported_failure(self, rank: int, report: Mapping[str, Any]) -> WorkerFailure:
        """The failure a rank reported. Its OSError is the failure's cause, so that a full or
        read-only disk here is told apart (experiments/storage.py) -- unless the rank runs on
        another server of a cluster: then its disk is that server's, and the failure names it
        (the results folder here is not the one that refused)."""
        server = getattr(self.hosts[rank], "server", None)
        if "errno" not in report:
            return self._failure(rank, report["message"])
        if server is not None:
            return self._failure(rank, f"{report['message']} (a file system of server {server}, where this rank runs, "
                                       f"not this machine's)")
        failure = self._failure(rank, report["message"])
        failure.__cause__ = OSError(report["errno"], os.strerror(report["errno"]), report["filename"])
        return failure

    def _raise_if_stopped(self, ranks: Sequence[int], symptom: str) -> None:
        """Fail naming a stopped worker among ``ranks`` or a stopped dependency, if there is
        one: it made no progress, so it is why the deadline passed (``symptom``). Else fail
        naming a switch the network shows is broken though running (its eBPF program
        detached from a port), else the rank the network shows the others waited for, if it
        shows one (its link down, the switch's slots waiting for its updates)."""
        for rank in ranks:
            pid, where, state = self._rank_state(rank)
            if state in STOPPED_STATES:
                raise self._failure(rank, f"(pid {pid}{where}) {stopped_evidence(pid, state)}; meanwhile {symptom}")
        cause = self._dependencies.stopped()
        if cause is not None:
            raise DependencyStopped(f"{cause}; meanwhile {self.method}: {symptom}")
        problems = self._switch_problems() if self._switch_problems is not None else []
        if problems:
            raise WorkerFailure(f"{'; '.join(problems)}; meanwhile {self.method}: {symptom}")
        found = self._waited_for() if self._waited_for is not None else {}
        for rank, host in enumerate(self.hosts):
            if host.name in found:
                raise self._failure(rank, f"{found[host.name]}; meanwhile {symptom}")

    def _rank_state(self, rank: int) -> tuple[int, str, str | None]:
        """``rank``'s pid, where it runs (for messages) and its state in /proc/PID/stat (None:
        gone, or unknown): read on its server for a host on another one, by its pid there
        (known once it was ready)."""
        from network.cluster import ClusterError

        remote = self.remote_shells.get(self.hosts[rank].name)
        if remote is None or rank >= len(self.pids_on_servers):
            pid = self.procs[rank].pid
            return pid, "", process_state(pid)
        server, run = remote
        pid = self.pids_on_servers[rank]
        try:
            return pid, f" on server {server}", stat_state(run(f"cat /proc/{pid}/stat 2>/dev/null || true"))
        except ClusterError:  # the server is out of reach: no evidence either way, the symptom stands
            return pid, f" on server {server}", None

    @contextlib.contextmanager
    def dependencies_checked(self) -> Iterator[None]:
        """An error inside (a control-plane call to a switch, say) becomes DependencyExited
        when a dependency has exited meanwhile: that is the cause, the error its symptom."""
        try:
            yield
        except Exception as symptom:
            exited = self._dependencies.exited(EXIT_NOTICE_S)
            if exited is not None:
                raise exited from symptom
            raise

    def finish(self) -> None:
        """Tell every rank to exit and wait for clean exits, within ``exit_limit``. A rank
        still running then is asked for its threads' stacks, which the failure shows."""
        self._send("exit")
        told = time.monotonic()
        for rank, proc in enumerate(self.procs):
            try:
                code = proc.wait(timeout=max(0.0, told + self.exit_limit.seconds - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise self._failure(rank, f"did not exit once told ({self.exit_limit.describe()}); where its threads were then:",
                                    tail=self._stacks(rank)) from None
            if code != 0:
                raise self._failure(rank, f"exited with status {code}")
        log.debug("%s: all %d ranks exited %.2f s after 'exit'", self.method, len(self.procs), time.monotonic() - told)

    def _stacks(self, rank: int) -> list[str]:
        """The Python stack of every thread of ``rank``, as it writes them to its log on
        STACKS_SIGNAL (hosts/worker.py), on whichever server it runs."""
        from network.cluster import ClusterError

        log_path = self._log_path(rank)
        before = log_path.stat().st_size
        remote = self.remote_shells.get(self.hosts[rank].name)
        try:
            if remote is None:
                self.procs[rank].send_signal(STACKS_SIGNAL)
            else:
                remote[1](f"kill -{STACKS_SIGNAL.name.removeprefix('SIG')} {self.pids_on_servers[rank]}")
        except (OSError, ClusterError, IndexError) as exc:
            return [f"(no stacks: {exc})"]
        time.sleep(STACKS_WAIT_S)  # faulthandler writes from its signal handler at once; the pipe from another server takes longer
        dump = log_path.read_bytes()[before:].decode(errors="replace").splitlines()
        return dump or [f"(nothing in its log within {STACKS_WAIT_S:.0f} s of {STACKS_SIGNAL.name}: it runs no Python code)"]

    def kill(self) -> None:
        with deferred_signals():
            self._kill()

    def _kill(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log.error("worker pid %d did not die after SIGKILL", proc.pid)
            for stream in (proc.stdin, proc.stdout):
                if stream is not None:
                    stream.close()
        self._selector.close()
        self._dependencies.close()
        self.procs.clear()

    def _failure(self, rank: int, what: str, tail: list[str] | None = None) -> WorkerFailure:
        """The failure of ``rank``: ``what``, then ``tail`` (default: the last lines of its log)."""
        log_path = self._log_path(rank)
        if tail is None:
            heading, tail = f"  last lines of {log_path}:", log_tail(log_path)
        else:
            heading = f"  (in {log_path})"
        host = self.hosts[rank].name
        log_text = "\n".join(f"    {line}" for line in tail) or "    (empty)"
        return WorkerFailure(f"{self.method}: worker rank {rank} on {host}: {what}\n{heading}\n{log_text}")

