"""The traffic manager's packet replication engine: multicast groups of (rid, port) nodes.

Mirrors bmv2's mc_mgrp_create / mc_node_create / mc_node_associate. The data path asks for
``replicas(group)``, a precomputed tuple of (rid, port), rebuilt only when the control
plane changes a group, so replication costs one dict lookup per packet.
"""

from __future__ import annotations

from typing import Sequence

from switches.control import ControlPlaneError

MAX_PORT = (1 << 9) - 1
MAX_RID = (1 << 16) - 1


class TrafficManager:
    def __init__(self) -> None:
        self._groups: dict[int, list[int]] = {}
        self._nodes: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._replicas: dict[int, tuple[tuple[int, int], ...]] = {}
        self._next_node = 0

    def mc_mgrp_create(self, group: int) -> None:
        if not 0 < group <= 0xFFFF:
            raise ControlPlaneError(f"multicast group {group} out of range 1..65535")
        if group in self._groups:
            raise ControlPlaneError(f"multicast group {group} already exists")
        self._groups[group] = []
        self._replicas[group] = ()

    def mc_node_create(self, rid: int, ports: Sequence[int]) -> int:
        if not 0 <= rid <= MAX_RID:
            raise ControlPlaneError(f"multicast rid {rid} out of range 0..{MAX_RID}")
        bad = [p for p in ports if not isinstance(p, int) or not 0 <= p <= MAX_PORT]
        if bad:
            raise ControlPlaneError(f"multicast node ports out of range 0..{MAX_PORT}: {bad}")
        handle = self._next_node
        self._next_node += 1
        self._nodes[handle] = (rid, tuple(ports))
        return handle

    def mc_node_associate(self, group: int, node_handle: int) -> None:
        if group not in self._groups:
            raise ControlPlaneError(f"multicast group {group} does not exist")
        if node_handle not in self._nodes:
            raise ControlPlaneError(f"multicast node {node_handle} does not exist")
        if node_handle in self._groups[group]:
            raise ControlPlaneError(f"multicast node {node_handle} is already in group {group}")
        self._groups[group].append(node_handle)
        self._replicas[group] = tuple(
            (rid, port) for handle in self._groups[group] for rid, ports in [self._nodes[handle]] for port in ports
        )

    def replicas(self, group: int) -> tuple[tuple[int, int], ...]:
        """(egress_rid, egress_port) of every copy; an unknown group replicates to nothing."""
        return self._replicas.get(group, ())
