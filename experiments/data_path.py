"""The SwitchML worker's data path on every server of a cluster, chosen before the run starts.

A config's ``protocol.data_path`` is resolved as it loads, on this machine: ``auto`` is the
native loop where it builds here (hosts/switchml/native). A worker on another server runs
that server's checkout, which may lack a compiler. So before a run over several servers
starts, each server that runs a SwitchML worker is asked (``python -m
hosts.switchml.native``, one ssh command per server) whether the native loop runs there:

- where every one says yes, nothing changes;
- ``auto`` with a server that says no: every worker of that point runs the Python worker
  (one implementation per point, so its numbers compare), and the run says so in one line;
- ``native`` with a server that says no: the run is refused before anything is built,
  naming the server and its reason (exit 2, like a config mistake).

A server that cannot be asked (unreachable, another checkout) is left to the network's
preflight, which names what is wrong with it.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import methods
from experiments.config import ConfigError, Experiment, Point, data_path_protocol
from methods.aggregation import DataPath
from network.cluster import SSH_CONNECT_S, Cluster, ClusterError
from network.cluster_config import LOCAL, Server

log = logging.getLogger(__name__)

def ask_command(point: Point) -> str:
    """What a server runs to say which data path it has: ``python -m`` the module of the
    protocol's data-path resolver (``Aggregation.data_path``), which prints ``<name>\\t<reason>``."""
    reference = data_path_protocol(point.methods).data_path
    assert reference is not None
    return f"-m {reference.partition(':')[0]}"

Ask = Callable[[str], DataPath | None]
"""Server name -> what it runs (None: it could not be asked)."""


def runs_a_data_path(point: Point) -> bool:
    """Whether some method of ``point`` runs a protocol whose worker has a choice of data path."""
    return any(protocol.data_path is not None for protocol in methods.aggregations_of(point.methods))


def servers_with_workers(point: Point) -> list[str]:
    """The other servers that run one of ``point``'s hosts, in the config's order."""
    if point.cluster is None:
        return []
    placement = point.cluster.place(point.topology)
    hosting = {placement.get(h.name, LOCAL) for h in point.topology.hosts}
    return [s.name for s in point.cluster.servers if s.name in hosting]


def needs_asking(point: Point) -> bool:
    """Whether ``point`` runs the native loop in SwitchML workers on another server."""
    return point.data_path.name == "native" and runs_a_data_path(point) and bool(servers_with_workers(point))


def choose(point: Point, ask: Ask) -> DataPath | None:
    """``point``'s data path given what its servers say (None: as resolved here)."""
    for server in servers_with_workers(point):
        theirs = ask(server)
        if theirs is None or theirs.name == "native":
            continue
        if point.protocol["data_path"] == "native":
            raise ConfigError(f"server {server}: protocol.data_path: native: {theirs.reason}; 'auto' runs the Python worker "
                              "on every server where one of them lacks it")
        return DataPath("python", f"the Python worker on every server: server {server} lacks the native data path ({theirs.reason})")
    return None


def ask_over_ssh(cluster: Cluster, answers: dict[Server, DataPath | None], asking: str) -> Ask:
    """An ``Ask`` through ``cluster``'s ssh connections; ``answers`` holds what each server
    said, so none is asked twice in a run."""

    def ask(server: str) -> DataPath | None:
        spec = cluster.servers[server]
        if spec not in answers:
            command = f"cd {shlex.quote(spec.checkout)} && {shlex.quote(spec.python)} {asking}"
            try:
                name, _, reason = cluster.check(server, command, "asking for its data path", timeout=SSH_CONNECT_S + 60).strip().partition("\t")
            except (ClusterError, subprocess.TimeoutExpired) as exc:
                log.debug("server %s not asked for its data path (the preflight will say why): %s", server, exc)
                answers[spec] = None
            else:
                answers[spec] = DataPath(name, reason) if name in ("native", "python") else None
        return answers[spec]

    return ask


def on_every_server(experiment: Experiment) -> Experiment:
    """``experiment`` with each point's data path one that all of its servers run."""
    answers: dict[Server, DataPath | None] = {}
    chosen: dict[int, DataPath] = {}
    for point in experiment.points:
        if not needs_asking(point):
            continue
        with tempfile.TemporaryDirectory(prefix="switchml-ssh-") as control:
            cluster = Cluster.start(point.cluster, point.topology, Path(control))
            try:
                path = choose(point, ask_over_ssh(cluster, answers, ask_command(point)))
            finally:
                cluster.close()
        if path is not None:
            chosen[point.index] = path
    for line in sorted({f"{data_path_protocol(experiment.points[index].methods).label} worker: {path.reason}"
                        for index, path in chosen.items()}):
        log.warning("%s", line)
    # what the servers lack (a compiler) no protocol's native loop has there: each runs the same loop
    return experiment.with_data_paths({index: {protocol.name: path for protocol in methods.aggregations_of(experiment.points[index].methods)}
                                       for index, path in chosen.items()})
