"""In Mininet, on every switch target: hosts have no static ARP entry for the switch's
virtual address, resolve it by ARP, and ``ping -c 3 10.0.0.254`` gets its three replies."""

from __future__ import annotations

from pathlib import Path

import pytest

from network.emulation import EmulatedNetwork, node_runner
from protocol import params
from protocol.switchml import params as switchml_params
from switches import programming
from switches.targets import REGISTRY
from tests.conftest import TARGET_MARKS, require_target
from topologies.model import find_topology, load_topology

pytestmark = [pytest.mark.mininet]


@pytest.mark.parametrize("target", [pytest.param(name, marks=TARGET_MARKS[name]) for name in sorted(REGISTRY)])
def test_hosts_resolve_and_ping_the_switch(target: str, tmp_path: Path) -> None:
    require_target(target)
    topology = load_topology(find_topology("star"), {"workers": 2})
    with EmulatedNetwork(topology, target, tmp_path, k=switchml_params.DEFAULT_K, max_pool_size=64, job_id=1, pool_size=8) as net:
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
