"""The hosts a protocol runs beside its workers (``Aggregation.servers_per_job``: ATP's
parameter server), and the processes they run.

A network adds them only for the jobs of a protocol that asks: each job's servers are
cabled to the aggregating switch with the workers' link (the first host link's shaping), and
named and addressed as on the simulated clock (switches/topology_fabric.py's ``server_stations``). What a server runs is its
protocol's (``Aggregation.server``), started by ``hosts/server.py`` with the workers' spec.
Its counts come back through a file that process rewrites on SIGUSR1 (``ServerProcess.counts``):
the runner records them per job, as the simulated clock does.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from methods.aggregation import Job
from protocol.params import REPO_ROOT
from switches.topology_fabric import server_stations
from topologies.model import LinkSpec, Topology

log = logging.getLogger(__name__)

SERVER_ENTRY = "hosts.server"
"""The module a server host runs (``python -m hosts.server REFERENCE SPEC --index I --counts FILE``)."""
STOP_WAIT_S = 5.0
READY_WAIT_S = 60.0
"""The longest a server may take to start serving (a Python process's imports on a busy machine)."""
COUNTS_WAIT_S = 10.0
"""The longest a serving process may take to write its counts once asked."""
POLL_S = 0.01


class ServerError(RuntimeError):
    """A server process that died, or did not answer in time; the message names its log."""


class ServerPlanError(ValueError):
    """The jobs' servers do not fit the topology's subnet."""


@dataclass(frozen=True)
class ServerHost:
    """One server host: its name and addresses, the job it serves (by position among the
    network's jobs) and which of that job's servers it is."""

    name: str
    ipv4: str
    mac: str
    job: int
    index: int


def plan_servers(topology: Topology, jobs: Sequence[Job]) -> tuple[ServerHost, ...]:
    """Every server the jobs' protocols ask for (switches/topology_fabric.py's
    ``server_stations`` names and addresses them), with the job each serves."""
    try:
        stations = server_stations(topology, [job.aggregation.servers_per_job for job in jobs])
    except ValueError as exc:
        asking = next(job.aggregation for job in jobs if job.aggregation.servers_per_job)
        raise ServerPlanError(f"topology {topology.name}: {exc} ({asking.label} asks for {asking.servers_per_job} per job)") from None
    return tuple(ServerHost(station.name, station.ipv4, station.mac, position, index)
                 for position, job_stations in enumerate(stations) for index, station in enumerate(job_stations))


def server_link(topology: Topology) -> LinkSpec:
    """The workers' link: what a server's link to the aggregating switch is shaped as."""
    hosts = {h.name for h in topology.hosts}
    return next(link.spec for link in topology.links if link.a in hosts or link.b in hosts)


class ServerProcess:
    """One server's process on its Mininet host, its output in its log, its counts in a file
    beside it that hosts/server.py writes once it serves and on every SIGUSR1."""

    def __init__(self, node: Any, server: ServerHost, reference: str, spec_path: Path, log_dir: Path) -> None:
        self.server = server
        self.log_file = log_dir / f"{server.name}.log"
        self.counts_file = log_dir / f"{server.name}.counts.json"
        self.counts_file.unlink(missing_ok=True)  # an earlier server's on this host (the point's previous method)
        argv = [sys.executable, "-m", SERVER_ENTRY, reference, str(spec_path), "--index", str(server.index),
                "--counts", str(self.counts_file)]
        with self.log_file.open("ab") as output:
            self.process: subprocess.Popen = node.popen(argv, cwd=str(REPO_ROOT), stdout=output, stderr=subprocess.STDOUT)
        log.info("started server %s (pid %d): %s", server.name, self.process.pid, reference)

    def _version(self) -> tuple[int, int] | None:
        """Which write of the counts file is there (each is a new file renamed over the last); None: none yet."""
        try:
            status = self.counts_file.stat()
        except FileNotFoundError:
            return None
        return status.st_ino, status.st_mtime_ns

    def wait_serving(self) -> None:
        """Return once the process serves (its first counts written): its socket is open, and a
        SIGUSR1 asks it for its counts rather than ending it."""
        deadline = time.monotonic() + READY_WAIT_S
        while self._version() is None:
            if self.process.poll() is not None:
                raise ServerError(f"server {self.server.name} exited ({self.process.returncode}) before it served; see {self.log_file}")
            if time.monotonic() > deadline:
                raise ServerError(f"server {self.server.name} did not serve within {READY_WAIT_S:g} s; see {self.log_file}")
            time.sleep(POLL_S)

    def counts(self) -> dict[str, int]:
        """Its counts so far (its protocol's ``Server.counts``), asked for now by SIGUSR1; those
        it wrote as it ended, for a server whose job is done."""
        last = self._version()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + COUNTS_WAIT_S
            while self._version() == last and self.process.poll() is None:
                if time.monotonic() > deadline:
                    raise ServerError(f"server {self.server.name} did not write its counts within {COUNTS_WAIT_S:g} s; see {self.log_file}")
                time.sleep(POLL_S)
        return json.loads(self.counts_file.read_text())

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a bounded wait."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
