"""A topology as the switches' control plane sees it (switches/fabric.py's ``Fabric``),
whatever numbers the switches' ports: the emulated network's Mininet ports
(network/emulation.py), or the simulated network's (simulation/network.py). One function,
so that both program their switches from the same facts with the same ``program_fabric``.

It lives with the control plane, below both networks, so that the simulated clock needs
nothing of the emulated network. The topology is read through ``FabricTopology``, the
part of topologies/model.py's ``Topology`` it uses (the two packages share a layer).
"""

from __future__ import annotations

import ipaddress
from typing import Any, Callable, Mapping, Protocol, Sequence

from switches.fabric import Fabric, Leaf, Station


class FabricTopology(Protocol):
    """What the control plane reads of a topology (topologies/model.py's ``Topology`` has it)."""

    @property
    def switches(self) -> Sequence[Any]:
        """Each with a ``name``."""

    @property
    def hosts(self) -> Sequence[Any]:
        """Each with ``name``, ``mac``, ``ipv4`` and ``rank``."""

    @property
    def aggregation(self) -> str: ...

    @property
    def aggregator(self) -> Any: ...

    @property
    def aggregator_mac(self) -> str: ...

    @property
    def aggregator_ipv4(self) -> str: ...

    @property
    def leaves(self) -> Sequence[Any]: ...

    def leaf_address(self, name: str) -> tuple[str, str]: ...

    def local_hosts(self, switch: str) -> Sequence[Any]: ...

    def drop_simulator_rates(self) -> Mapping[str, tuple[float, float]]: ...

    @property
    def subnet(self) -> Any:
        """Its ipaddress.IPv4Network."""


SERVER_MAC_PREFIX = "02:00:00:01"
"""Server hosts' MACs: 02:00:00:01:<number, 16 bits> (the workers' are 02:00:00:00:...)."""


def server_stations(topology: FabricTopology, per_job: Sequence[int]) -> tuple[tuple[Station, ...], ...]:
    """The hosts a network adds beside the workers (``Aggregation.servers_per_job``: ATP's
    parameter server), ``per_job[i]`` for the i-th job, cabled to the aggregating switch:
    named srv1, srv2, ... in job order, addressed from the top of the subnet down, below the
    aggregator's and the leaves' own addresses, so that no topology's host clashes with them;
    MACs ``SERVER_MAC_PREFIX``:<number>. The one naming of server hosts, on both clocks.
    ValueError naming the first server that finds no free address."""
    taken = {ipaddress.IPv4Address(h.ipv4) for h in topology.hosts}
    top = topology.subnet.broadcast_address - 2 - len(topology.leaves)
    jobs: list[tuple[Station, ...]] = []
    number = 0
    for count in per_job:
        stations = []
        for _ in range(count):
            number += 1
            address = top - (number - 1)
            if address in taken or address <= topology.subnet.network_address:
                raise ValueError(f"subnet {topology.subnet} has no free address for server {number}")
            stations.append(Station(f"srv{number}", f"{SERVER_MAC_PREFIX}:{number >> 8:02x}:{number & 0xFF:02x}", str(address)))
        jobs.append(tuple(stations))
    return tuple(jobs)


def topology_fabric(topology: FabricTopology, port_towards: Callable[[str, str], int], ports: Mapping[str, tuple[int, ...]],
                    drop_simulator: bool, servers: Sequence[Station] = ()) -> Fabric:
    """``topology``'s fabric: ``port_towards(switch, node)`` is the port of ``switch`` on the
    path to ``node``, ``ports`` every switch's data ports; ``drop_simulator``: the links'
    loss is emulated by the switches' drop simulators (Topology.drop_simulator_rates);
    ``servers``: the jobs' server hosts (``server_stations``), which ``port_towards`` reaches."""
    switches = [s.name for s in topology.switches]
    nodes = [*(h.name for h in topology.hosts), *switches, *(s.name for s in servers)]
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
