"""The hosts a protocol runs beside its workers (``Aggregation.servers_per_job``: ATP's
parameter server), and the processes they run.

A network adds them only for the jobs of a protocol that asks: each job's servers are
cabled to the aggregating switch with the workers' link (the first host link's shaping), and
named and addressed as on the simulated clock (switches/topology_fabric.py's ``server_stations``). What a server runs is its
protocol's (``Aggregation.server``), started by ``hosts/server.py`` with the workers' spec.
"""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from methods.aggregation import Job
from protocol.params import REPO_ROOT
from switches.topology_fabric import server_stations
from topologies.model import LinkSpec, Topology

log = logging.getLogger(__name__)

SERVER_ENTRY = "hosts.server"
"""The module a server host runs (``python -m hosts.server REFERENCE SPEC --index I``)."""
STOP_WAIT_S = 5.0


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
    """One server's process on its Mininet host, its output in its log."""

    def __init__(self, node: Any, server: ServerHost, reference: str, spec_path: Path, log_dir: Path) -> None:
        self.server = server
        self.log_file = log_dir / f"{server.name}.log"
        argv = [sys.executable, "-m", SERVER_ENTRY, reference, str(spec_path), "--index", str(server.index)]
        with self.log_file.open("ab") as output:
            self.process: subprocess.Popen = node.popen(argv, cwd=str(REPO_ROOT), stdout=output, stderr=subprocess.STDOUT)
        log.info("started server %s (pid %d): %s", server.name, self.process.pid, reference)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a bounded wait."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
