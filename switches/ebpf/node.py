"""``EbpfSwitchNode``: the eBPF switch as a Mininet switch (root namespace, like OVS).

The same constructor keywords and ``control()`` as the other targets' nodes, so
topologies and the runner treat every target alike (see ``switches/targets.py``). Port
numbers are Mininet's. The switch has no process: its work runs in the kernel's softirqs
on whichever core received a frame, so ``switch_pid`` is None and the switch's CPU shows
up as the machine's softirq time (fidelity.csv), not as any process's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocol import params
from switches.control import SwitchControl
from switches.ebpf.datapath import EbpfDataPlane
from switches.mininet_node import TargetSwitch


class EbpfSwitchNode(TargetSwitch):
    def __init__(
        self,
        name: str,
        log_dir: Path = Path("/tmp"),
        k: int = params.K,
        max_pool_size: int = params.MAX_POOL_SIZE,
        **kwargs: Any,
    ) -> None:
        """``log_dir`` is accepted for the common node signature; the data plane writes no log
        (its counters are in maps). k is the program's (SWITCHML_K in constants.p4)."""
        if k != params.K:
            raise ValueError(f"the eBPF program is built for k = {params.K} (SWITCHML_K in p4/include/constants.p4); got k = {k}")
        super().__init__(name, **kwargs)
        self.log_dir = Path(log_dir)
        self.max_pool_size = max_pool_size
        self._data_plane: EbpfDataPlane | None = None

    def start(self, controllers: list) -> None:
        ports = self.ports_up()
        self._data_plane = EbpfDataPlane(ports, name=self.name, max_pool_size=self.max_pool_size)
        self._data_plane.start()

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's signature)
        if self._data_plane is not None:
            self._data_plane.stop()
            self._data_plane = None
        super().stop(deleteIntfs)

    @property
    def switch_pid(self) -> int | None:
        """None: the eBPF switch has no process (its CPU time is softirq time)."""
        return None

    def control(self, command_log: Path | None = None) -> SwitchControl:
        if self._data_plane is None or not self._data_plane.running:
            raise RuntimeError(f"eBPF switch {self.name} is not running")
        return self._data_plane.control(command_log)
