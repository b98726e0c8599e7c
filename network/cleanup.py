"""Remove what a killed run left behind: its processes, interfaces and temporary folders.

    sudo .venv/bin/python -m network.cleanup

A run that is killed with SIGKILL cannot clean up. Its workers and switch die with it
(base.lifetime), but a network-building run also leaves veths in the root namespace
(the kernel frees those of dead namespaces only minutes later, and never the links
between two switches), its temporary folders, and any process it started without the
parent-death signal. ``remove_leftovers`` removes exactly what the dead run recorded in
the network lock (network.lock); every run calls it when it finds such a record, so
usually nothing is left for a user to do.

The command is for the rest: it does the same while no run holds the network, and also
removes what no record names -- testbed interfaces (``hN-ethM``, ``sN-ethM``) in the root
namespace, processes marked with the pid of a dead holder, networks' temporary folders
(``/tmp/switchml-net-*``), and what each switch target says its killed switches leave
(``SwitchTarget.remove_leftovers``: the embedded switch's socket folders whose switch no
longer answers, the eBPF switch's pins of a loader killed while loading). It refuses while
a run holds the network.

What a cleanup cannot remove (a folder on a read-only file system, a server out of reach) it
names in one line and writes down, dated, with the command that removes it, in
``LEFTOVERS_RECORD``; the command says when that file lists something.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from network.lock import HOLDER_ENV, HolderRecord, NetworkLock
from switches.targets import REGISTRY

log = logging.getLogger("network.cleanup")

TESTBED_INTERFACE = re.compile(r"^[hs]\d+-eth\d+$")
SCRATCH_PREFIX = "switchml-net-"
"""An emulated network's temporary folder (network.emulation)."""
KILL_WAIT_S = 5.0


LEFTOVERS_RECORD = Path(os.environ.get("SWITCHML_LEFTOVERS_RECORD", "/var/tmp/switchml-testbed-leftovers.log"))
"""Where a cleanup writes down what it could not remove (a folder on a read-only file system,
a server out of reach), one line each, dated, with the command that removes it later: the
log of the run that left it scrolls away, this file stays until someone reads it
(``SWITCHML_LEFTOVERS_RECORD`` names another file: the tests' own)."""
REMOTE_CLEANUP_S = 60.0


def remove_folder(directory: Path) -> str | None:
    """Remove ``directory`` and all in it; None when it is gone (or never was), else why not
    (the first error: a read-only or full file system, a busy mount). ``rmtree`` with
    ``ignore_errors`` reported a folder removed that was still there."""
    errors: list[BaseException] = []
    shutil.rmtree(directory, onerror=lambda function, path, info: errors.append(info[1]))
    if not directory.exists():
        return None
    first = errors[0] if errors else None
    if isinstance(first, OSError) and first.strerror:
        return f"{first.strerror}: {first.filename}" if first.filename else first.strerror
    return str(first) if first is not None else "still there"


def remove_folders(directories: list[str], record: bool = True) -> tuple[list[str], list[str]]:
    """``remove_folder`` on each of ``directories`` that exists: the folders removed, and those
    that stay, each logged and (``record``) written down in LEFTOVERS_RECORD. On a cluster's
    other server the controlling machine writes it down, from the cleanup's words there."""
    removed, left = [], []
    for directory in map(Path, directories):
        if not directory.exists():
            continue
        failure = remove_folder(directory)
        if failure is None:
            removed.append(f"folder {directory}")
        else:
            left.append(f"folder {directory}")
            log.error("could not remove folder %s: %s", directory, failure)
            if record:
                record_leftover(f"folder {directory} ({failure}); remove it with rm -rf {shlex.quote(str(directory))}")
    return removed, left


def record_leftover(line: str) -> None:
    """Append ``line`` to LEFTOVERS_RECORD, dated; a record that cannot be written is logged."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        with LEFTOVERS_RECORD.open("a") as record:
            record.write(f"{stamp} {line}\n")
    except OSError as exc:
        log.error("could not write down in %s what was left (%s): %s", LEFTOVERS_RECORD, line, exc.strerror)


def run_remote_cleanup(server: str, argv: list[str]) -> str | None:
    """Run a server's cleanup (``Cluster.cleanup_argv``: network.cleanup --holder over ssh);
    what it removed, or None when it failed, which is logged naming the server and why (its
    own words, or ssh's exit status where it said nothing: an unreachable server) and
    written down in LEFTOVERS_RECORD with the command that finishes it."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=REMOTE_CLEANUP_S)
        said = " ".join((done.stderr or done.stdout).split())
        if done.returncode == 0:
            return said or "nothing was left"
        why = said or (f"not reachable over ssh (ssh exited with status {done.returncode})" if done.returncode == 255
                       else f"its cleanup exited with status {done.returncode}")
    except subprocess.TimeoutExpired:
        why = f"its cleanup did not finish within {REMOTE_CLEANUP_S:.0f} s"
    except OSError as exc:
        why = f"cannot run ssh: {exc.strerror}"
    log.error("server %s: cleanup failed: %s (written down in %s)", server, why, LEFTOVERS_RECORD)
    record_leftover(f"server {server}: what a run left there was not removed ({why}); remove it with {shlex.join(argv)}")
    return None


def remove_leftovers(record: HolderRecord) -> list[str]:
    """Kill the dead holder's processes, delete its interfaces and folders; what was removed."""
    removed = [f"process {pid}" for pid in kill_marked_processes({record.pid})]
    removed += [f"interface {name}" for name in delete_interfaces(record.interfaces)]
    removed += remove_folders(record.directories)[0]
    for argv in record.commands:  # what it left on a cluster's other servers (network/cluster.py)
        said = run_remote_cleanup(f"at {argv[-2]}", argv)  # ssh ... ADDRESS COMMAND
        if said is not None:
            removed.append(f"on another server: {said}")
    return removed


def clean_for_holder(holder: int, directories: list[str]) -> tuple[list[str], bool]:
    """On a cluster's other server: remove what the run ``holder`` of the controlling machine
    left here -- processes marked with its pid, testbed interfaces in this root namespace, the
    folders its files were copied into; what was removed, and whether all of it went. (No
    lock: the run holds it on its own machine.)"""
    removed = [f"process {pid}" for pid in kill_marked_processes({holder})]
    testbed = [name for name in root_interfaces() if TESTBED_INTERFACE.match(name)]
    removed += [f"interface {name}" for name in delete_interfaces(testbed)]
    folders, left = remove_folders(directories, record=False)
    return removed + folders, not left


def kill_marked_processes(holders: set[int]) -> list[int]:
    """SIGKILL every process whose environment names one of ``holders`` as its network
    holder, and wait for them to go; the pids killed."""
    marks = {f"{HOLDER_ENV}={pid}".encode() for pid in holders}
    killed = []
    for pid, environ in _environments():
        if pid != os.getpid() and marks & set(environ.split(b"\0")):
            try:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + KILL_WAIT_S
    while any(Path(f"/proc/{pid}").exists() for pid in killed) and time.monotonic() < deadline:
        time.sleep(0.05)
    return killed


def _environments() -> list[tuple[int, bytes]]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((int(entry.name), (entry / "environ").read_bytes()))
            except OSError:  # gone meanwhile, or a kernel thread
                continue
    return found


def root_interfaces() -> list[str]:
    """Names of the interfaces in the root namespace."""
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    return [line.split(": ")[1].split("@")[0] for line in out.splitlines()]


def delete_interfaces(names: list[str]) -> list[str]:
    """Delete those of ``names`` that exist (a veth takes its peer with it); the ones deleted."""
    present = set(root_interfaces())
    deleted = []
    for name in names:
        if name in present and subprocess.run(["ip", "link", "delete", name], capture_output=True).returncode == 0:
            deleted.append(name)
    return deleted


def dead_holders() -> set[int]:
    """Pids named as network holder by some process's environment that no longer exist."""
    holders = set()
    for _, environ in _environments():
        for item in environ.split(b"\0"):
            if item.startswith(f"{HOLDER_ENV}=".encode()):
                holders.add(int(item.split(b"=", 1)[1]))
    return {pid for pid in holders if not Path(f"/proc/{pid}").exists()}


def clean_all() -> list[str]:
    """Everything ``remove_leftovers`` removes, and the unrecorded rest (see the module doc).
    The caller holds the network lock."""
    removed = [f"process {pid}" for pid in kill_marked_processes(dead_holders())]
    testbed = [name for name in root_interfaces() if TESTBED_INTERFACE.match(name)]
    removed += [f"interface {name}" for name in delete_interfaces(testbed)]
    scratch = sorted(Path(tempfile.gettempdir()).glob(f"{SCRATCH_PREFIX}*"))  # no network is up: none is in use
    removed += remove_folders([str(directory) for directory in scratch])[0]
    for target in REGISTRY.values():  # what only the target knows it leaves
        removed += target.remove_leftovers()
    return removed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m network.cleanup", description=__doc__.split("\n\n")[0])
    parser.add_argument("--holder", type=int, help="on a cluster's other server: remove what the run with this pid on the "
                        "controlling machine left here (it runs this itself at its end)")
    parser.add_argument("--directory", action="append", default=[], help="with --holder: a folder of its files to remove")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    if os.geteuid() != 0:
        log.error("cleaning up namespaces, interfaces and processes needs root: run with sudo")
        return 2
    if args.holder is not None:
        removed, complete = clean_for_holder(args.holder, args.directory)
        if removed:
            log.info("removed %s", ", ".join(removed))
        elif complete:
            log.info("removed nothing (nothing was left)")
        return 0 if complete else 1
    lock = NetworkLock()
    if not lock.acquire(wait=False):
        log.error("a run holds the network (%s); nothing cleaned: stop that run first", lock.holder())
        return 1
    try:
        removed = remove_leftovers(lock.previous) if lock.previous is not None else []
        removed += clean_all()
    finally:
        lock.release()
    for item in removed:
        log.info("removed %s", item)
    log.info("nothing left behind" if not removed else f"removed {len(removed)} leftover(s)")
    if LEFTOVERS_RECORD.is_file() and LEFTOVERS_RECORD.stat().st_size:
        log.warning("%s lists what earlier cleanups could not remove, each with the command that does", LEFTOVERS_RECORD)
    return 0


if __name__ == "__main__":
    sys.exit(main())
