"""The hosts a protocol runs beside its workers (network/servers.py): only for the jobs of a
protocol that asks, named and addressed so that they clash with nothing of the topology; and
their processes, which give the runner their counts when asked."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

import methods
from methods.aggregation import Job
from network.servers import ServerError, ServerHost, ServerPlanError, ServerProcess, plan_servers, server_link
from protocol.worker_spec import WorkerSpec
from tests.toy_aggregation import AGGREGATION, ToyParameters
from topologies.model import find_topology, load_topology

PARAMETERS = ToyParameters(k=32, pool_size=4, job_id=1)


def test_only_a_protocol_that_asks_gets_servers_each_job_its_own() -> None:
    topology = load_topology(find_topology("star"), {"workers": 4})
    hosts = tuple(h.name for h in topology.hosts)
    served = replace(AGGREGATION, servers_per_job=2)
    switchml = Job(methods.SWITCHML.aggregation, PARAMETERS, hosts)
    servers = plan_servers(topology, [switchml, Job(served, PARAMETERS, hosts[:2]), Job(served, replace(PARAMETERS, job_id=2), hosts[2:])])
    assert [(s.name, s.job, s.index) for s in servers] == [("srv1", 1, 0), ("srv2", 1, 1), ("srv3", 2, 0), ("srv4", 2, 1)]
    assert [s.ipv4 for s in servers] == ["10.0.0.253", "10.0.0.252", "10.0.0.251", "10.0.0.250"], "below the aggregator's .254"
    assert len({s.mac for s in servers} | {h.mac for h in topology.hosts} | {topology.aggregator_mac}) == 4 + 4 + 1
    assert plan_servers(topology, [switchml]) == ()
    assert server_link(topology) == topology.links[0].spec


def test_servers_that_do_not_fit_the_subnet_are_refused_naming_the_protocol() -> None:
    topology = load_topology(find_topology("star"), {"workers": 32})
    crowded = replace(AGGREGATION, servers_per_job=230)
    with pytest.raises(ServerPlanError, match=r"has no free address for server \d+ \(Toy sum asks for 230 per job\)"):
        plan_servers(topology, [Job(crowded, PARAMETERS, tuple(h.name for h in topology.hosts))])


class TickingServer:
    """A server for the tests below (``Aggregation.server``'s contract): it counts its loop's
    turns until stopped; index 1 refuses to start, as a server with a bad spec does."""

    def __init__(self, spec: WorkerSpec, index: int) -> None:
        if index == 1:
            raise ValueError("no such server")
        self.turns = 0

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(0.005):
            self.turns += 1

    def counts(self) -> dict[str, int]:
        return {"turns": self.turns}

    def close(self) -> None:
        pass


def ticking_process(tmp_path: Path, index: int = 0) -> ServerProcess:
    """``python -m hosts.server`` running ``TickingServer`` as a network starts it (here on this host, not a Mininet one)."""
    spec = WorkerSpec(method="switchml", n_workers=1, switch_ipv4="127.0.0.1", link_mbps=None, protocol=None, peers=(),
                      job_timeout_s=5.0, connect_timeout_s=5.0)
    station = ServerHost("srv1", "127.0.0.1", "02:00:00:00:00:01", job=0, index=index)
    return ServerProcess(SimpleNamespace(popen=subprocess.Popen), station, "tests.test_network_servers:TickingServer", spec.write(tmp_path / "spec.json"), tmp_path)


def test_a_server_process_gives_its_counts_whenever_asked_and_as_it_ends(tmp_path: Path) -> None:
    """The runner's side of the counts file (hosts/server.py's): ready once it serves, fresh
    counts on each ask (SIGUSR1) while it serves on, its last ones once stopped."""
    server = ticking_process(tmp_path)
    try:
        server.wait_serving()
        first = server.counts()["turns"]
        time.sleep(0.1)
        second = server.counts()["turns"]
        assert second > first and server.process.poll() is None, "asked twice, counted on in between, still serving"
    finally:
        server.stop()
    assert server.process.returncode == 0
    assert server.counts()["turns"] >= second, "once it has ended: what it wrote as it stopped"
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".srv1.counts")], "every write renamed into place"


def test_a_server_that_fails_to_start_is_named_with_its_log(tmp_path: Path) -> None:
    server = ticking_process(tmp_path, index=1)
    with pytest.raises(ServerError, match=r"server srv1 exited \(2\) before it served; see .*srv1\.log"):
        server.wait_serving()
    assert "hosts.server: no such server" in server.log_file.read_text()
