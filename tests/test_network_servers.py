"""The hosts a protocol runs beside its workers (network/servers.py): only for the jobs of a
protocol that asks, named and addressed so that they clash with nothing of the topology."""

from __future__ import annotations

from dataclasses import replace

import pytest

import methods
from methods.aggregation import Job
from network.servers import ServerPlanError, plan_servers, server_link
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
