"""In Mininet, on every switch target: hosts have no static ARP entry for the switch's
virtual address, resolve it by ARP, and ``ping -c 3 10.0.0.254`` gets its three replies;
and so they do again once the network has loaded another protocol's program."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import methods
from methods.aggregation import Job
from methods.method import in_network
from network.emulation import EmulatedNetwork, node_runner
from protocol import params
from protocol.switchml import params as switchml_params
from protocol.worker_spec import SwitchMLParameters
from switches.switchml import programming
from switches.targets import REGISTRY
from tests.conftest import TARGET_MARKS, require_target
from topologies.model import find_topology, load_topology

pytestmark = [pytest.mark.mininet]


@pytest.mark.parametrize("target", [pytest.param(name, marks=TARGET_MARKS[name]) for name in sorted(REGISTRY)])
def test_hosts_resolve_and_ping_the_switch(target: str, tmp_path: Path) -> None:
    require_target(target)
    topology = load_topology(find_topology("star"), {"workers": 2})
    with EmulatedNetwork(topology, target, tmp_path, k=switchml_params.DEFAULT_K, max_pool_size=64) as net:
        run = node_runner(net.host("h1"))
        code, neighbours = run(["ip", "neigh", "show", params.SWITCH_IPV4])
        assert code == 0 and params.SWITCH_MAC in neighbours and "PERMANENT" not in neighbours, neighbours
        assert run(["ip", "neigh", "flush", "to", params.SWITCH_IPV4])[0] == 0
        control = net.aggregator_control
        programming.reset_event_counters(control)
        code, out = run(["ping", "-c", "3", "-i", "0.2", "-W", "2", params.SWITCH_IPV4])
        assert code == 0 and "3 received" in out, out
        counts = programming.read_event_counters(control)
        assert counts["EV_ICMP_ECHO_REPLY"] == 3
        assert counts["EV_ARP_REPLY"] >= 1, "the flushed neighbour was resolved by ARP again"


@pytest.mark.parametrize("target", [pytest.param(name, marks=TARGET_MARKS[name]) for name in sorted(REGISTRY)])
def test_preparing_a_method_of_another_protocol_reloads_every_switch(target: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """``prepare`` of a method whose protocol's program is not loaded restarts every switch
    with it (here a second protocol whose program, on every target, is SwitchML's) and
    programs it afresh: the hosts ping the switch again, and its counters start from zero
    (only the one echo each host's resolving of the address costs, on lossless links)."""
    require_target(target)
    again = replace(methods.SWITCHML.aggregation, name="again", label="SwitchML again")
    monkeypatch.setitem(REGISTRY[target].programs, again.name, REGISTRY[target].programs[methods.SWITCHML.aggregation.name])
    topology = load_topology(find_topology("star"), {"workers": 2})
    hosts = tuple(h.name for h in topology.hosts)
    parameters = SwitchMLParameters(k=switchml_params.DEFAULT_K, pool_size=8, job_id=1, timeout_ms=20.0, backoff_every=1)
    jobs = [Job(methods.SWITCHML.aggregation, parameters, hosts), Job(again, parameters, hosts)]
    with EmulatedNetwork(topology, target, tmp_path, k=switchml_params.DEFAULT_K, max_pool_size=64, jobs=jobs) as net:
        run = node_runner(net.host("h1"))
        assert run(["ping", "-c", "2", "-i", "0.2", "-W", "2", params.SWITCH_IPV4])[0] == 0
        assert programming.read_event_counters(net.aggregator_control)["EV_ICMP_ECHO_REPLY"] >= 2
        net.prepare(in_network(again, name="again", label="again", colour="k", verify=methods.SWITCHML.verify, bound=methods.SWITCHML.bound))
        assert net.loaded is again and programming.read_event_counters(net.aggregator_control)["EV_ICMP_ECHO_REPLY"] == len(hosts)
        code, out = run(["ping", "-c", "3", "-i", "0.2", "-W", "2", params.SWITCH_IPV4])
        assert code == 0 and "3 received" in out, out
        worker_entries = net.aggregator_control.table_num_entries(programming.WORKER_TABLE)
        assert worker_entries == len(hosts), "the reloaded switch is programmed for the job"
