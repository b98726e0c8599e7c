"""EmbeddedSwitchNode: the embedded switch as a Mininet switch (root namespace, like OVS).

Port numbers are Mininet's (``self.ports[intf]``), so the testbed programs the same port
numbers it sees in the topology. The process is managed by the shared launcher.
"""

from __future__ import annotations

from pathlib import Path

from protocol import params
from switches.control import SwitchControl
from switches.embedded.launcher import EmbeddedSwitchProcess
from switches.mininet_node import TargetSwitch


class EmbeddedSwitchNode(TargetSwitch):
    def __init__(
        self,
        name: str,
        log_dir: Path = Path("/tmp"),
        k: int = params.K,
        max_pool_size: int = params.MAX_POOL_SIZE,
        seed: int | None = None,
        link_delay_ms: float = 0.0,
        **kwargs,
    ) -> None:
        super().__init__(name, **kwargs)
        self.log_dir = Path(log_dir)
        self.k = k
        self.max_pool_size = max_pool_size
        self.seed = seed
        self.link_delay_ms = link_delay_ms
        """Propagation delay of the links, emulated by the switch (kernels without netem)."""
        self._switch: EmbeddedSwitchProcess | None = None

    def start(self, controllers: list) -> None:
        ports = self.ports_up()
        self._switch = EmbeddedSwitchProcess(
            ports, self.log_dir, name=self.name, k=self.k, max_pool_size=self.max_pool_size, seed=self.seed,
            link_delay_ms=self.link_delay_ms,
        )
        self._switch.start()

    def stop(self, deleteIntfs: bool = True) -> None:
        if self._switch is not None:
            self._switch.stop()
            self._switch = None
        super().stop(deleteIntfs)

    @property
    def switch_pid(self) -> int | None:
        """Pid of the switch process (None when stopped), for CPU accounting."""
        return None if self._switch is None else self._switch.pid

    def control(self, command_log: Path | None = None) -> SwitchControl:
        if self._switch is None or not self._switch.running:
            raise RuntimeError(f"embedded switch {self.name} is not running")
        return self._switch.control(command_log)
