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

from switches.bmv2.compile import CompileOptions, compile_p4
from switches.bmv2.process import THRIFT_PORT_BASE, free_tcp_port
from switches.bmv2 import TARGET, program_for
from switches.mininet_node import TargetSwitch

_device_ids = itertools.count()


class Bmv2SwitchNode(TargetSwitch):
    """A Mininet switch backed by simple_switch; Mininet's port numbers are bmv2's ports."""

    target = TARGET

    def __init__(
        self,
        name: str,
        json_path: Path | None = None,
        protocol: str | None = None,
        thrift_port: int | None = None,
        device_id: int | None = None,
        log_level: str = "warn",
        **kwargs: Any,
    ) -> None:
        """``json_path`` runs a prebuilt program (built for its own k and pool size); without it
        the node compiles ``protocol``'s program (switches/bmv2/__init__.py, ``program_for``) for ``k``
        and ``max_pool_size`` (cached by compile.py)."""
        super().__init__(name, **kwargs)
        self.device_id = next(_device_ids) if device_id is None else device_id
        self.thrift_port = free_tcp_port(THRIFT_PORT_BASE + self.device_id) if thrift_port is None else thrift_port
        self.prebuilt = json_path is not None
        self.json_path = json_path if json_path is not None else compile_p4(CompileOptions(program=program_for(protocol), max_pool_size=self.max_pool_size, k=self.k))
        self.log_level = log_level

    def data_plane_options(self) -> dict[str, Any]:
        return {"json_path": self.json_path, "device_id": self.device_id, "thrift_port": self.thrift_port,
                "log_level": self.log_level, "popen": self.popen}

    def portable_data_plane_options(self) -> dict[str, Any]:
        """Without this process's popen (the other server launches simple_switch itself) and
        without the program's path in this checkout: that server compiles the same program for
        the same k and pool size into its own checkout's cache."""
        if self.prebuilt:
            raise ValueError(f"bmv2 switch {self.name}: a prebuilt program ({self.json_path}) exists only on this machine; "
                             "a switch on another server compiles its own")
        return {"device_id": self.device_id, "thrift_port": self.thrift_port, "log_level": self.log_level}
