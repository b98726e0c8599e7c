"""A topology as the switches' control plane sees it (switches/fabric.py's ``Fabric``),
whatever numbers the switches' ports: the emulated network's Mininet ports
(network/emulation.py), or the simulated network's (simulation/network.py). One function,
so that both program their switches from the same facts with the same ``program_fabric``.

It lives with the control plane, below both networks, so that the simulated clock needs
nothing of the emulated network. The topology is read through ``FabricTopology``, the
part of topologies/model.py's ``Topology`` it uses (the two packages share a layer).
"""

from __future__ import annotations

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


def server_stations(topology: FabricTopology, job_ids: Sequence[int], per_job: int) -> dict[int, tuple[Station, ...]]:
    """The hosts a network adds beside the workers for each of ``job_ids`` (``per_job`` each,
    ``Aggregation.servers_per_job``), cabled to the aggregating switch: named srv1, srv2, ...
    in job order, addressed after the workers from the bottom of the subnet (the switches
    take its top), MACs 02:00:00:01:<number, 16 bits>. ValueError when the subnet has no room."""
    first = len(topology.hosts) + 1
    count = len(job_ids) * per_job
    last_free = topology.subnet.num_addresses - 2 - len(topology.switches)  # the switches count down from broadcast - 1
    if first + count - 1 > last_free:
        raise ValueError(f"subnet {topology.subnet} has no room for {count} server host(s) after {len(topology.hosts)} workers "
                         f"and {len(topology.switches)} switches; give a wider subnet")
    numbers = iter(range(1, count + 1))
    return {job_id: tuple(Station(f"srv{n}", f"02:00:00:01:{n >> 8:02x}:{n & 0xFF:02x}",
                                  str(topology.subnet.network_address + first + n - 1))
                          for n in (next(numbers) for _ in range(per_job)))
            for job_id in job_ids}


def topology_fabric(topology: FabricTopology, port_towards: Callable[[str, str], int], ports: Mapping[str, tuple[int, ...]],
                    drop_simulator: bool, servers: Mapping[int, tuple[Station, ...]] | None = None) -> Fabric:
    """``topology``'s fabric: ``port_towards(switch, node)`` is the port of ``switch`` on the
    path to ``node``, ``ports`` every switch's data ports; ``drop_simulator``: the links'
    loss is emulated by the switches' drop simulators (Topology.drop_simulator_rates);
    ``servers``: each job's server hosts (``server_stations``), which ``port_towards`` reaches."""
    switches = [s.name for s in topology.switches]
    servers = dict(servers or {})
    nodes = [*(h.name for h in topology.hosts), *switches, *(s.name for stations in servers.values() for s in stations)]
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
        servers=servers,
    )
