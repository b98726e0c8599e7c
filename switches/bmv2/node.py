"""``Bmv2SwitchNode``: a Mininet switch that runs p4/switchml.p4 in bmv2's simple_switch.

It has the same constructor keywords (``log_dir``, ``k``, ``max_pool_size``) and the same
``control()`` method as the embedded switch's node, so topologies and the runner treat
both targets alike (see ``switches/targets.py``).
"""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

from protocol import params
from switches.bmv2.compile import CompileOptions, compile_p4
from switches.bmv2.control import Bmv2Control
from switches.bmv2.process import Bmv2Process, free_tcp_port
from switches.control import SwitchControl
from switches.mininet_node import TargetSwitch

log = logging.getLogger(__name__)

THRIFT_PORT_BASE = 9090
"""simple_switch's usual Thrift port; switch number i prefers 9090 + i."""

_device_ids = itertools.count()


class Bmv2SwitchNode(TargetSwitch):
    """A Mininet switch backed by simple_switch; Mininet's port numbers are bmv2's ports."""

    def __init__(
        self,
        name: str,
        log_dir: Path,
        k: int = params.K,
        max_pool_size: int = params.MAX_POOL_SIZE,
        json_path: Path | None = None,
        thrift_port: int | None = None,
        device_id: int | None = None,
        log_level: str = "warn",
        **kwargs: Any,
    ) -> None:
        """``json_path`` runs a prebuilt program (built for its own pool size); without it
        the node compiles p4/switchml.p4 for ``max_pool_size`` (cached by compile.py)."""
        if k != params.K:
            raise ValueError(
                f"the P4 program is built for k = {params.K} (SWITCHML_K in p4/include/constants.p4); got k = {k}"
            )
        super().__init__(name, **kwargs)
        self.log_dir = Path(log_dir)
        self.device_id = next(_device_ids) if device_id is None else device_id
        self.thrift_port = free_tcp_port(THRIFT_PORT_BASE + self.device_id) if thrift_port is None else thrift_port
        self.json_path = json_path if json_path is not None else compile_p4(CompileOptions(max_pool_size=max_pool_size))
        self.log_level = log_level
        self._bmv2: Bmv2Process | None = None

    def start(self, controllers: list[Any]) -> None:
        """Run simple_switch on this node's interfaces (Mininet calls this from net.start)."""
        interfaces = self.switch_ports()
        self._bmv2 = Bmv2Process(
            name=self.name,
            json_path=self.json_path,
            interfaces=interfaces,
            thrift_port=self.thrift_port,
            device_id=self.device_id,
            log_dir=self.log_dir,
            log_level=self.log_level,
            popen=self.popen,
        )
        self._bmv2.start()

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's signature)
        if self._bmv2 is not None:
            self._bmv2.stop()
            self._bmv2 = None
        super().stop(deleteIntfs)

    @property
    def switch_pid(self) -> int | None:
        """Pid of simple_switch (None when stopped), for CPU accounting."""
        return None if self._bmv2 is None else self._bmv2.pid

    def control(self, command_log: Path | None = None) -> SwitchControl:
        """A control-plane connection to this switch (the caller closes it)."""
        if self._bmv2 is None or not self._bmv2.running():
            raise RuntimeError(f"{self.name}: simple_switch is not running (start the network first)")
        return Bmv2Control(self.thrift_port, json_path=self.json_path, command_log=command_log)
