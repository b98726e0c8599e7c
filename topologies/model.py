"""Topologies: YAML description -> validated, fully expanded graph of hosts, switches, links.

A topology file is either generated (``kind: star`` / ``kind: tree`` with a worker count)
or explicit (every switch, host and link listed). Either way the result is the same
``Topology``: hosts in rank order with their addresses, switches with the one that
aggregates, and links with their shaping. Experiment configs may override any top-level
key (``workers``, ``link``...) before validation, which is how sweeps change the size.
"""

from __future__ import annotations

import functools
import ipaddress
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from protocol import params
from base.yamlschema import ConfigError, deep_merge, load_schema, load_yaml, reject_keys, validate

TOPOLOGY_DIR = Path(__file__).resolve().parent
SCHEMA_PATH = TOPOLOGY_DIR / "topology.schema.yaml"

AGGREGATOR_MAC = params.SWITCH_MAC
"""Virtual MAC the workers send updates to (the aggregating switch answers from it)."""
LEAF_MAC_PREFIX = "02:53:4d:4c:01"
"""In hierarchical aggregation leaf i (0-based) is a worker of the spine: MAC <prefix>:<i+1>.

Addresses count from the subnet's ends: host of rank r is the subnet's address r + 1, the
aggregating switch's virtual IPv4 its last host address (.254 of a /24), leaf i the one
i + 1 below that (.253 - i of a /24). A /24 holds 237 hosts beside 16 leaves; a larger
(simulated) tree gives a wider ``subnet``."""

DEFAULT_SUBNET = "10.0.0.0/24"
_COMMON_KEYS = {"name", "description", "kind", "subnet"}
KIND_KEYS: dict[str, set[str]] = {
    "star": _COMMON_KEYS | {"workers", "link"},
    "tree": _COMMON_KEYS | {"workers", "leaves", "link", "uplink", "aggregation"},
    "explicit": _COMMON_KEYS | {"switches", "hosts", "links"},
}
"""Top-level keys each kind accepts (the schema lists the union)."""

DEFAULT_LINK: dict[str, Any] = {"bw_mbps": None, "delay_ms": 0.0, "loss": 0.0, "queue_packets": 1000}


@dataclass(frozen=True)
class LinkSpec:
    """Shaping of one link, applied in both directions."""

    bw_mbps: float | None
    delay_ms: float
    loss: float
    queue_packets: int


@dataclass(frozen=True)
class HostSpec:
    name: str
    rank: int
    ipv4: str
    mac: str


@dataclass(frozen=True)
class SwitchSpec:
    name: str
    aggregate: bool


@dataclass(frozen=True)
class LinkDef:
    a: str
    b: str
    spec: LinkSpec


@dataclass(frozen=True)
class Topology:
    name: str
    kind: str
    hosts: tuple[HostSpec, ...]
    switches: tuple[SwitchSpec, ...]
    links: tuple[LinkDef, ...]
    subnet: ipaddress.IPv4Network
    resolved: Mapping[str, Any]
    """The validated YAML after overrides, as written to a run's topology.yaml."""
    aggregation: str = "spine"
    """spine: only the aggregating switch aggregates; hierarchical (trees): every leaf too."""

    @property
    def aggregator(self) -> SwitchSpec:
        return next(s for s in self.switches if s.aggregate)

    @property
    def aggregator_ipv4(self) -> str:
        return str(self.subnet.broadcast_address - 1)

    @property
    def aggregator_mac(self) -> str:
        return AGGREGATOR_MAC

    @property
    def leaves(self) -> list[SwitchSpec]:
        """The switches below the aggregating one, in order."""
        return [s for s in self.switches if not s.aggregate]

    @property
    def link_mbps(self) -> float | None:
        """The slowest shaped link's rate (None when no link is shaped): the bottleneck a
        worker paces to and the line-rate bound refers to."""
        rates = [link.spec.bw_mbps for link in self.links if link.spec.bw_mbps is not None]
        return min(rates) if rates else None

    def worker_share_mbps(self, link_mbps: float, one_stream_per_leaf: bool | None = None) -> float:
        """The rate each worker's stream gets at its bottleneck: its own link's, or its share
        of its leaf's uplink to the aggregating switch when that carries several streams
        (every local worker's; one, the leaf's partial sum, when ``one_stream_per_leaf``,
        by default when the leaf aggregates). A 4:1 over-subscribed uplink paces a job at a
        quarter of the host link: the network's pace, not the emulator's."""
        if one_stream_per_leaf is None:
            one_stream_per_leaf = self.aggregation == "hierarchical"
        rate = link_mbps
        for leaf in self.leaves:
            streams = 1 if one_stream_per_leaf else len(self.local_hosts(leaf.name))
            for link in self.links:
                if {link.a, link.b} == {leaf.name, self.aggregator.name} and link.spec.bw_mbps is not None and streams:
                    rate = min(rate, link.spec.bw_mbps / streams)
        return rate

    @property
    def round_trip_s(self) -> float:
        """The link delays a packet from the farthest host to the aggregating switch and back
        crosses (each link delays each direction by its ``delay_ms``): no all-reduce, which
        needs every host's data, is faster."""
        one_way = 0.0
        for host in self.hosts:
            node, delay = host.name, 0.0
            while node != self.aggregator.name:
                hop = self.next_hop(node, self.aggregator.name)
                delay += next(l.spec.delay_ms for l in self.links if {l.a, l.b} == {node, hop})
                node = hop
            one_way = max(one_way, delay)
        return 2 * one_way / 1000

    @property
    def link_loss(self) -> float:
        """The highest loss rate of any link."""
        return max(link.spec.loss for link in self.links)

    def leaf_address(self, name: str) -> tuple[str, str]:
        """(MAC, IPv4) of a leaf as a worker of the spine (hierarchical aggregation)."""
        index = [s.name for s in self.leaves].index(name)
        return f"{LEAF_MAC_PREFIX}:{index + 1:02x}", str(self.subnet.broadcast_address - 2 - index)

    def local_hosts(self, switch: str) -> list[HostSpec]:
        """The hosts cabled to ``switch``, in rank order."""
        return [h for h in self.hosts if self.next_hop(switch, h.name) == h.name]

    def drop_simulator_rates(self) -> dict[str, tuple[float, float]]:
        """Per switch, the (ingress, egress) drop probability that emulates the links' loss
        with the switches' drop simulators (no netem). Two cases can be expressed: one loss
        rate on every link (each direction that ends at a switch is dropped at its ingress,
        one that ends at a host at the switch's egress; in a tree a leaf's egress also covers
        its uplink, which so sees the loss twice), and loss on the links between switches
        only, with lossless host links (dropped at the aggregating switch, in and out, when
        all its links go to other switches: a tree's spine). ValueError otherwise."""
        losses = {link.spec.loss for link in self.links}
        host_names = {h.name for h in self.hosts}
        if len(losses) == 1:
            loss = losses.pop()
            return {s.name: (loss, loss if self.local_hosts(s.name) else 0.0) for s in self.switches}
        host_losses = {l.spec.loss for l in self.links if l.a in host_names or l.b in host_names}
        switch_losses = {l.spec.loss for l in self.links if l.a not in host_names and l.b not in host_names}
        top = self.aggregator.name
        if host_losses == {0.0} and len(switch_losses) == 1 and not self.local_hosts(top):
            loss = switch_losses.pop()
            return {s.name: (loss, loss) if s.name == top else (0.0, 0.0) for s in self.switches}
        raise ValueError(
            f"links have different loss rates {sorted(losses)}; the switch drop simulator applies one rate to every "
            "link, or one rate to the links between switches when host links are lossless and the aggregating switch "
            "has no hosts"
        )

    def fan_in(self) -> dict[str, int]:
        """Per aggregating switch, how many workers it sums: every host at the aggregator; in
        hierarchical aggregation each leaf its own hosts and the spine its leaves that have hosts."""
        if self.aggregation != "hierarchical":
            return {self.aggregator.name: len(self.hosts)}
        local = {leaf.name: len(self.local_hosts(leaf.name)) for leaf in self.leaves}
        return {self.aggregator.name: sum(1 for count in local.values() if count), **{name: c for name, c in local.items() if c}}

    @functools.cached_property
    def _adjacency(self) -> dict[str, list[str]]:
        """Every node's neighbours in the links' order, computed once: a simulated tree of 256
        hosts asks for the paths between every switch and node (4,624 for the fabric alone),
        which at 4.5 ms each, scanning the links at every step, took 21 s."""
        adjacency: dict[str, list[str]] = {}
        for link in self.links:
            adjacency.setdefault(link.a, []).append(link.b)
            adjacency.setdefault(link.b, []).append(link.a)
        return adjacency

    @functools.cached_property
    def _routes(self) -> dict[str, dict[str, str | None]]:
        """destination -> every node's next hop towards it (filled by ``next_hop``)."""
        return {}

    def neighbours(self, node: str) -> list[str]:
        return list(self._adjacency.get(node, ()))

    def next_hop(self, src: str, dst: str) -> str:
        """First node after ``src`` on the (unique in a tree) shortest path to ``dst``."""
        parents = self._routes.get(dst)
        if parents is None:
            parents = self._routes[dst] = {dst: None}
            queue = deque([dst])
            while queue:
                node = queue.popleft()
                for nb in self._adjacency.get(node, ()):
                    if nb not in parents:
                        parents[nb] = node
                        queue.append(nb)
        hop = parents.get(src)
        if hop is None:
            raise ConfigError(f"topology {self.name}: no path from {src} to {dst}")
        return hop


def _link_spec(data: Mapping[str, Any]) -> LinkSpec:
    merged = {**DEFAULT_LINK, **{k: v for k, v in data.items() if k != "endpoints"}}
    return LinkSpec(
        bw_mbps=None if merged["bw_mbps"] is None else float(merged["bw_mbps"]),
        delay_ms=float(merged["delay_ms"]),
        loss=loss_probability(merged["loss"]),
        queue_packets=int(merged["queue_packets"]),
    )


def _host(index: int, subnet: ipaddress.IPv4Network) -> HostSpec:
    """Host of rank ``index`` (0-based): h<index+1>, the subnet's address index+1, 02:00:00:00:<index+1, 16 bits>."""
    number = index + 1
    return HostSpec(name=f"h{number}", rank=index, ipv4=str(subnet.network_address + number),
                    mac=f"02:00:00:00:{number >> 8:02x}:{number & 0xFF:02x}")


def _expand(data: Mapping[str, Any], subnet: ipaddress.IPv4Network, source: str) -> tuple[list[HostSpec], list[SwitchSpec], list[LinkDef]]:
    kind = data["kind"]
    if kind == "star":
        hosts = [_host(i, subnet) for i in range(data["workers"])]
        link = _link_spec(data.get("link", {}))
        return hosts, [SwitchSpec("s1", True)], [LinkDef(h.name, "s1", link) for h in hosts]
    if kind == "tree":
        leaves = data["leaves"]
        if data["workers"] < leaves:
            raise ConfigError(f"{source}: workers: a tree with {leaves} leaves needs at least {leaves} workers, got {data['workers']}")
        hosts = [_host(i, subnet) for i in range(data["workers"])]
        link = _link_spec(data.get("link", {}))
        uplink = _link_spec(data.get("uplink", data.get("link", {})))
        switches = [SwitchSpec("s1", True)] + [SwitchSpec(f"s{i + 2}", False) for i in range(leaves)]
        links = [LinkDef(f"s{i + 2}", "s1", uplink) for i in range(leaves)]
        links += [LinkDef(h.name, f"s{h.rank % leaves + 2}", link) for h in hosts]
        return hosts, switches, links
    switches = [SwitchSpec(s["name"], bool(s.get("aggregate", False))) for s in data["switches"]]
    # Ranks follow the order hosts are listed in; addresses follow the ranks.
    hosts = [_host(i, subnet) for i in range(len(data["hosts"]))]
    hosts = [HostSpec(h["name"], spec.rank, spec.ipv4, spec.mac) for h, spec in zip(data["hosts"], hosts)]
    links = [LinkDef(l["endpoints"][0], l["endpoints"][1], _link_spec(l)) for l in data["links"]]
    return hosts, switches, links


def _check_addresses(topology: Topology, source: str, key_prefix: str) -> None:
    """Every host, leaf and the aggregator an address of their own in the subnet (hosts from
    its bottom, switches from its top)."""
    needed = len(topology.hosts) + len(topology.switches)
    if needed > topology.subnet.num_addresses - 2:
        raise ConfigError(f"{source}: {key_prefix}subnet: {len(topology.hosts)} hosts and {len(topology.switches)} switches need "
                          f"{needed} addresses, {topology.subnet} holds {topology.subnet.num_addresses - 2}; give a wider subnet "
                          "(e.g. subnet: 10.0.0.0/16)")


def _check_fan_in(topology: Topology, source: str, key_prefix: str) -> None:
    """No aggregating switch sums more workers than its bitmap has bits (protocol/params.py's MAX_WORKERS)."""
    key = "hosts" if topology.kind == "explicit" else "workers"
    for switch, workers in topology.fan_in().items():
        if workers > params.MAX_WORKERS:
            raise ConfigError(
                f"{source}: {key_prefix}{key}: switch {switch} would aggregate {workers} workers; a switch aggregates at most {params.MAX_WORKERS} "
                "(the width of its programs' bitmaps, MAX_WORKERS in protocol/params.py): spread them over a tree (kind: tree) with "
                f"aggregation: hierarchical and at most {params.MAX_WORKERS} workers per leaf"
            )


def _check_graph(topology: Topology, source: str) -> None:
    names = [h.name for h in topology.hosts] + [s.name for s in topology.switches]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"{source}: names used twice: {', '.join(duplicates)}")
    aggregators = [s.name for s in topology.switches if s.aggregate]
    if len(aggregators) != 1:
        raise ConfigError(f"{source}: switches: exactly one switch must have aggregate: true, found {aggregators or 'none'}")
    known = set(names)
    switch_names = {s.name for s in topology.switches}
    for i, link in enumerate(topology.links):
        for end in (link.a, link.b):
            if end not in known:
                raise ConfigError(f"{source}: links[{i}].endpoints: unknown node {end!r}")
        if link.a not in switch_names and link.b not in switch_names:
            raise ConfigError(f"{source}: links[{i}].endpoints: a link must touch a switch, got {link.a}-{link.b}")
    for host in topology.hosts:
        if len(topology.neighbours(host.name)) != 1:
            raise ConfigError(f"{source}: host {host.name} must have exactly one link, has {len(topology.neighbours(host.name))}")
        topology.next_hop(host.name, topology.aggregator.name)
    if len(topology.links) != len(known) - 1:
        raise ConfigError(f"{source}: links: the topology must be a tree (a spanning tree has {len(known) - 1} links, found {len(topology.links)})")


def load_topology(path: Path, overrides: Mapping[str, Any] | None = None, context: str | None = None) -> Topology:
    """Load, override, validate and expand a topology file.

    With ``context`` (the experiment config that overrides it), errors name that config and
    the key as written there ('configs/x.yaml: topology.workers: ...').
    """
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a topology file must be a mapping")
    data = deep_merge(data, dict(overrides or {}))
    source = str(path) if context is None else f"{context}: topology ({path.name})"
    key_prefix = "" if context is None else "topology."
    _check_loss_unit(data, source, key_prefix)
    validate(data, load_schema(SCHEMA_PATH), source, key_prefix)
    reject_keys(data, KIND_KEYS[data["kind"]], f"kind {data['kind']}", source, key_prefix)
    try:
        subnet = ipaddress.IPv4Network(data.get("subnet", DEFAULT_SUBNET))
    except ValueError as exc:
        raise ConfigError(f"{source}: {key_prefix}subnet: {data['subnet']!r} is not an IPv4 network ({exc})") from None
    hosts, switches, links = _expand(data, subnet, source)
    topology = Topology(
        name=data.get("name", path.stem),
        kind=data["kind"],
        hosts=tuple(hosts),
        switches=tuple(switches),
        links=tuple(links),
        subnet=subnet,
        resolved=data,
        aggregation=data.get("aggregation", "spine"),
    )
    _check_graph(topology, source)
    _check_addresses(topology, source, key_prefix)
    _check_fan_in(topology, source, key_prefix)
    return topology


def loss_probability(loss: float | str) -> float:
    """A link's loss as a probability: a number is one, a string a percentage with its unit
    ("1%", "0.01 %": the schema's pattern)."""
    return float(loss.strip().removesuffix("%")) / 100 if isinstance(loss, str) else float(loss)


def _check_loss_unit(data: Mapping[str, Any], source: str, key_prefix: str) -> None:
    """A loss is a percentage with its unit ("1%") or a probability (0.01); figures and the
    docs speak of percent. A probability of 1 or more, or 100 % or more, loses every packet
    (no all-reduce ends): a number like that is a percentage typed as a probability, and is
    refused saying so, before the schema's bare 'greater than the maximum'."""
    sections = [(f"{key_prefix}{name}", data.get(name)) for name in ("link", "uplink")]
    links = data.get("links")
    if isinstance(links, list):  # anything else: the schema says what links must be
        sections += [(f"{key_prefix}links[{i}]", link) for i, link in enumerate(links)]
    for where, section in sections:
        loss = section.get("loss") if isinstance(section, Mapping) else None
        if isinstance(loss, (int, float)) and not isinstance(loss, bool) and loss >= 1:
            raise ConfigError(f"{source}: {where}.loss: {loss:g} would lose every packet: a number is a probability, not a percentage; "
                              f"for {loss:g} % write \"{loss:g}%\" or {loss / 100:g}")
        if isinstance(loss, str):
            try:
                every_packet = loss_probability(loss) >= 1
            except ValueError:  # no percentage: the schema says what a loss may be
                continue
            if every_packet:
                raise ConfigError(f"{source}: {where}.loss: {loss.strip()} would lose every packet; give less than 100 %")


def find_topology(name: str, relative_to: Path | None = None) -> Path:
    """A topology given as a path (relative to the config) or as a file name in topologies/."""
    for candidate in ([relative_to / name] if relative_to else []) + [Path(name), TOPOLOGY_DIR / name, TOPOLOGY_DIR / f"{name}.yaml"]:
        if candidate.is_file():
            return candidate
    raise ConfigError(f"topology {name!r}: no such file (looked next to the config and in {TOPOLOGY_DIR})")
