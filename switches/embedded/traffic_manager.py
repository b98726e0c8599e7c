"""The traffic manager's packet replication engine: multicast groups of (rid, port) nodes.

Mirrors bmv2's mc_mgrp_create / mc_node_create / mc_node_associate. The data path asks for
``replicas(group)``, a precomputed tuple of (rid, port), rebuilt only when the control
plane changes a group, so replication costs one dict lookup per packet.
"""

from __future__ import annotations

from typing import Sequence

from switches.control import (
    ControlPlaneError,
    check_mc_group,
    check_mc_node,
    mc_group_exists_error,
    mc_group_missing_error,
    mc_node_missing_error,
)


class TrafficManager:
    def __init__(self) -> None:
        self._groups: dict[int, list[int]] = {}
        self._nodes: dict[int, tuple[int, tuple[int, ...]]] = {}
        self._replicas: dict[int, tuple[tuple[int, int], ...]] = {}
        self._next_node = 0

    def mc_mgrp_create(self, group: int) -> None:
        check_mc_group(group)
        if group in self._groups:
            raise mc_group_exists_error(group)
        self._groups[group] = []
        self._replicas[group] = ()

    def mc_node_create(self, rid: int, ports: Sequence[int]) -> int:
        check_mc_node(rid, ports)
        handle = self._next_node
        self._next_node += 1
        self._nodes[handle] = (rid, tuple(ports))
        return handle

    def mc_node_associate(self, group: int, node_handle: int) -> None:
        if group not in self._groups:
            raise mc_group_missing_error(group)
        if node_handle not in self._nodes:
            raise mc_node_missing_error(node_handle)
        if node_handle in self._groups[group]:
            raise ControlPlaneError(f"multicast node {node_handle} is already in group {group}")
        self._groups[group].append(node_handle)
        self._replicas[group] = tuple(
            (rid, port) for handle in self._groups[group] for rid, ports in [self._nodes[handle]] for port in ports
        )

    def replicas(self, group: int) -> tuple[tuple[int, int], ...]:
        """(egress_rid, egress_port) of every copy; an unknown group replicates to nothing."""
        return self._replicas.get(group, ())
