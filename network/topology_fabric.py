"""A topology as the switches' control plane sees it (switches/fabric.py's ``Fabric``),
whatever numbers the switches' ports: the emulated network's Mininet ports, or the
simulated network's (simulation/network.py). One function, so that both program their
switches from the same facts with the same protocol programmer (``Aggregation.program_fabric``)."""

from __future__ import annotations

from typing import Callable, Mapping, Sequence

from switches.fabric import Fabric, Leaf, Station
from topologies.model import Topology


def topology_fabric(topology: Topology, port_towards: Callable[[str, str], int], ports: Mapping[str, tuple[int, ...]],
                    drop_simulator: bool, servers: Sequence[Station] = ()) -> Fabric:
    """``topology``'s fabric: ``port_towards(switch, node)`` is the port of ``switch`` on the
    path to ``node``, ``ports`` every switch's data ports; ``drop_simulator``: the links'
    loss is emulated by the switches' drop simulators (Topology.drop_simulator_rates);
    ``servers``: the hosts a protocol runs beside the workers, on the aggregating switch."""
    switches = [s.name for s in topology.switches]
    nodes = [*(h.name for h in topology.hosts), *(s.name for s in servers), *switches]
    return Fabric(
        switches=tuple(switches),
        aggregator=Station(topology.aggregator.name, topology.aggregator_mac, topology.aggregator_ipv4),
        leaves={leaf.name: Leaf(Station(leaf.name, *topology.leaf_address(leaf.name)), tuple(h.name for h in topology.local_hosts(leaf.name)))
                for leaf in topology.leaves},
        hosts=tuple(Station(h.name, h.mac, h.ipv4) for h in sorted(topology.hosts, key=lambda h: h.rank)),
        hierarchical=topology.aggregation == "hierarchical",
        ports={name: tuple(sorted(ports[name])) for name in switches},
        towards={(switch, node): port_towards(switch, node) for switch in switches for node in nodes if node != switch},
        drop_rates=topology.drop_simulator_rates() if drop_simulator else None,
        servers=tuple(servers),
    )
