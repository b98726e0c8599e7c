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


def topology_fabric(topology: FabricTopology, port_towards: Callable[[str, str], int], ports: Mapping[str, tuple[int, ...]],
                    drop_simulator: bool) -> Fabric:
    """``topology``'s fabric: ``port_towards(switch, node)`` is the port of ``switch`` on the
    path to ``node``, ``ports`` every switch's data ports; ``drop_simulator``: the links'
    loss is emulated by the switches' drop simulators (Topology.drop_simulator_rates)."""
    switches = [s.name for s in topology.switches]
    nodes = [*(h.name for h in topology.hosts), *switches]
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
    )
