"""A config's ``cluster:`` section: the servers besides this one, and which node runs where.

Read when a config loads (experiments/config.py checks it against the topology) and when
the network is built (network/cluster.py runs it); nothing here starts anything or imports
Mininet. Placement suits the workload: a star's hosts are spread over the servers in rank
order (this machine first, with the switch), a two-level tree's leaves go to the servers in
turn with all their hosts, so that only leaf-spine links cross servers (hierarchical
aggregation then sends one packet per slot between servers), and ``placement`` may name
any node's server. Mininet's own placers cannot do this here: they run only from a
``Topo`` object (network/emulation.py builds without one) and ``HostSwitchBinPlacer``
divides with ``/``, a KeyError on Python 3.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from protocol.params import REPO_ROOT
from topologies.model import Topology

LOCAL = "local"
"""The controlling machine's name in a cluster config."""


@dataclass(frozen=True)
class Server:
    """A server other than the controlling machine."""

    name: str
    address: str
    user: str
    checkout: str
    """This repository's checkout there (with its .venv)."""

    @property
    def python(self) -> str:
        return f"{self.checkout}/.venv/bin/python"

    def translate(self, argument: str) -> str:
        """This checkout's Python or folder as the server's: a command written for this
        machine runs the server's own checkout there. Data paths stay as they are: the run's
        files are copied to the same paths on the server (network/cluster.py)."""
        if argument == sys.executable:
            return self.python
        if argument == str(REPO_ROOT):
            return self.checkout
        return argument


@dataclass(frozen=True)
class ClusterSpec:
    """A config's ``cluster:`` section, checked against the topology it places."""

    servers: tuple[Server, ...]
    placement: Mapping[str, str]
    """What the config names explicitly (node -> server); the rest is ``place``'s."""
    ssh_config: Path | None = None
    link: str = "vxlan"

    @classmethod
    def from_config(cls, data: Mapping[str, Any]) -> ClusterSpec:
        """From a loaded config's section (its ssh_config made absolute by the loader)."""
        servers = tuple(Server(s["name"], s["address"], s.get("user", "root"), s["checkout"].rstrip("/") or "/") for s in data["servers"])
        ssh_config = data.get("ssh_config")
        return cls(servers, dict(data.get("placement", {})), None if ssh_config is None else Path(ssh_config), data.get("link", "vxlan"))

    def check(self, topology: Topology) -> None:
        """Refuse what cannot be placed (ValueError naming the key)."""
        names = [s.name for s in self.servers]
        if LOCAL in names:
            raise ValueError(f"cluster.servers: {LOCAL!r} is this machine's name; give the server another")
        if len(set(names)) != len(names):
            raise ValueError(f"cluster.servers: names must differ, got {names}")
        nodes = {n.name for n in [*topology.hosts, *topology.switches]}
        for node, server in self.placement.items():
            if node not in nodes:
                raise ValueError(f"cluster.placement: no node {node!r} in the topology (it has {', '.join(sorted(nodes))})")
            if server not in [LOCAL, *names]:
                raise ValueError(f"cluster.placement.{node}: no server {server!r}; choose {LOCAL} or one of {', '.join(names)}")
        if self.ssh_config is not None and not self.ssh_config.is_file():
            raise ValueError(f"cluster.ssh_config: no file {self.ssh_config}")

    def place(self, topology: Topology) -> dict[str, str]:
        return place(topology, [s.name for s in self.servers], self.placement)


def place(topology: Topology, servers: Sequence[str], explicit: Mapping[str, str]) -> dict[str, str]:
    """Node name -> server: ``explicit`` where it names one, else what suits the topology
    (the module doc); ``servers`` are the names of the other servers, the controlling machine
    first of all the places."""
    places = [LOCAL, *servers]
    placement: dict[str, str] = {}
    leaves = list(topology.leaves)
    if leaves and any(topology.local_hosts(leaf.name) for leaf in leaves):
        for i, leaf in enumerate(leaves):  # leaf i with its hosts on server i (mod the servers)
            where = places[i % len(places)]
            placement[leaf.name] = where
            for host in topology.local_hosts(leaf.name):
                placement[host.name] = where
    else:
        hosts = sorted(topology.hosts, key=lambda h: h.rank)
        share = -(-len(hosts) // len(places))  # ceil: the controlling machine takes the remainder first
        for i, host in enumerate(hosts):
            placement[host.name] = places[i // share]
    for switch in topology.switches:
        placement.setdefault(switch.name, LOCAL)
    for node, server in explicit.items():
        placement[node] = server
    return {node: server for node, server in placement.items()}
