"""``Bmv2SwitchNode``: a Mininet switch that runs a protocol's P4 program in bmv2's simple_switch
(switches/mininet_node.py has the lifecycle every target's node shares).

What it adds: the program is compiled (or a prebuilt one chosen) when the node is made,
so a compile error stops the network before it starts; each node gets its own device id
and Thrift port; and simple_switch is launched through the node's popen.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from switches.bmv2.process import THRIFT_PORT_BASE, free_tcp_port
from switches.bmv2 import TARGET
from switches.mininet_node import TargetSwitch

_device_ids = itertools.count()


class Bmv2SwitchNode(TargetSwitch):
    """A Mininet switch backed by simple_switch; Mininet's port numbers are bmv2's ports."""

    target = TARGET

    def __init__(
        self,
        name: str,
        json_path: Path | None = None,
        thrift_port: int | None = None,
        device_id: int | None = None,
        log_level: str = "warn",
        **kwargs: Any,
    ) -> None:
        """``json_path`` runs a prebuilt program (built for its own k and pool size); without it
        the node compiles its protocol's program for ``k`` and ``max_pool_size`` (the target's
        ``build``, cached): here, so that a compile error stops the network before it starts,
        and again when the node loads another protocol's program."""
        super().__init__(name, **kwargs)
        self.device_id = next(_device_ids) if device_id is None else device_id
        self.thrift_port = free_tcp_port(THRIFT_PORT_BASE + self.device_id) if thrift_port is None else thrift_port
        self.prebuilt = json_path is not None
        self.json_path = json_path if json_path is not None else self.compiled()
        self.log_level = log_level

    def compiled(self) -> Path:
        """The node's protocol's program compiled for its k and pool size."""
        return self.target.build(self.protocol, self.k, self.max_pool_size)

    def data_plane_options(self) -> dict[str, Any]:
        if not self.prebuilt:
            self.json_path = self.compiled()
        return {"json_path": self.json_path, "device_id": self.device_id, "thrift_port": self.thrift_port,
                "log_level": self.log_level, "popen": self.popen, "port_rate_bps": self.port_rate_bps,
                "port_queue_packets": self.port_queue_packets}

    def portable_data_plane_options(self) -> dict[str, Any]:
        """Without this process's popen (the other server launches simple_switch itself) and
        without the program's path in this checkout: that server compiles the same program for
        the same k and pool size into its own checkout's cache."""
        if self.prebuilt:
            raise ValueError(f"bmv2 switch {self.name}: a prebuilt program ({self.json_path}) exists only on this machine; "
                             "a switch on another server compiles its own")
        return {"device_id": self.device_id, "thrift_port": self.thrift_port, "log_level": self.log_level, "port_rate_bps": self.port_rate_bps,
                "port_queue_packets": self.port_queue_packets}
