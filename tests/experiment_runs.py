"""Running run_experiment.py as a user would, disturbing it mid-run, and finding what it left.

Shared by the end-to-end tests (test_testbed_e2e, test_reliability): each starts the real
command on the embedded switch and checks afterwards that no interface, namespace or
process of the run survived.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from network.cleanup import remove_leftovers
from network.lock import NetworkLock
from protocol.params import REPO_ROOT

MAIN_CONFIG = REPO_ROOT / "configs" / "8workers.yaml"
NETWORK_WAIT_S = 600
"""How long a run may wait for the network before its workers appear: other runs on the
machine (another test session, say) can hold it for minutes."""
EMULATION_INTERFACE = re.compile(r"^(s\d+-eth\d+|h\d+-eth\d+)\b")


def experiment_argv(out: Path, *overrides: str, config: Path = MAIN_CONFIG, target: str = "embedded") -> list[str]:
    argv = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(config), "--out", str(out), "--switch", target]
    for override in overrides:
        argv += ["--set", override]
    return argv


def run_experiment(out: Path, *overrides: str, timeout: float = NETWORK_WAIT_S + 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(experiment_argv(out, *overrides), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def disturb_mid_run(out: Path, overrides: list[str], worker_pattern: str,
                    disturb: Callable[[subprocess.Popen, int], None], config: Path = MAIN_CONFIG,
                    target: str = "embedded") -> tuple[int, str]:
    """Start a long run, wait until a worker matching ``worker_pattern`` runs, call
    ``disturb(runner, worker_pid)`` a second into the job; return the run's exit status and output."""
    runner = subprocess.Popen(experiment_argv(out, *overrides, config=config, target=target), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, stdin=subprocess.DEVNULL)
    try:
        worker = wait_for_process(f"hosts.worker {out}{worker_pattern}", timeout=NETWORK_WAIT_S, runner=runner)
        time.sleep(1.0)  # mid-job
        disturb(runner, worker)
        output, _ = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
    return runner.returncode, output


def leftovers(marker: str) -> list[str]:
    """Interfaces, namespaces, processes and the work folder (inputs) a run in the results
    folder ``marker`` could leave behind. Looked for while holding the network lock, so that
    the live network of another run on the machine is not taken for leftovers; what another
    run that died holding the network left is removed first, as every next holder does."""
    lock = NetworkLock()
    lock.acquire()
    try:
        found = []
        if lock.previous is not None:  # a run died holding the network: its record says whose
            if any(Path(d).is_relative_to(marker) for d in lock.previous.directories):
                found.append(f"the network lock's record of this run (pid {lock.previous.pid}), which died holding it")
            remove_leftovers(lock.previous)  # as any next holder does, whether the dead run is this one or not
        found += _leftovers(marker)
    finally:
        lock.release()
    return found


def _leftovers(marker: str) -> list[str]:
    found = [f"folder {Path(marker, 'work')}"] if Path(marker, "work").exists() else []
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    for line in links.splitlines():
        name = line.split(": ")[1].split("@")[0]
        if EMULATION_INTERFACE.match(name):
            found.append(f"interface {name}")
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    found += [f"netns {n}" for n in netns if n.startswith(("h", "s")) and n[1:].isdigit()]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline or ("mininet:" in cmdline and _in_this_mount_namespace(proc)):
            found.append(f"process {proc.name}: {cmdline.strip()}")
    return found


def _in_this_mount_namespace(proc: Path) -> bool:
    """Whether ``proc`` sees this machine's files. A Mininet shell that does not is another
    world's, never a run of this one: a lab grade's in its sandbox (which runs beside these
    tests under ``-n``) or the second server's (test_cluster.py looks there itself)."""
    try:
        return os.readlink(proc / "ns" / "mnt") == os.readlink("/proc/self/ns/mnt")
    except OSError:
        return False


def shell_of(runner: int, node: str) -> int:
    """The pid of Mininet's shell of ``node`` in the run ``runner`` (a child of it: other runs
    on the machine have shells of the same name)."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes().endswith(f"mininet:{node}\0".encode()):
                if int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == runner:
                    return int(proc.name)
        except OSError:
            continue
    raise AssertionError(f"run {runner} has no shell of {node}")


def wait_for_process(pattern: str, timeout: float, runner: subprocess.Popen | None = None) -> int:
    """The pid of a process matching ``pattern``; fails at once when ``runner`` (the run that
    would start it) has exited instead, quoting its output, rather than waiting out ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if runner is not None and runner.poll() is not None:
            raise AssertionError(f"the run exited with {runner.returncode} before a process matched {pattern!r}:\n"
                                 f"{runner.stdout.read() if runner.stdout else ''}")
        found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
        if found:
            return int(found[0])
        time.sleep(0.1)
    raise AssertionError(f"no process matching {pattern!r} within {timeout} s")
