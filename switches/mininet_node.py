"""A switch target as a Mininet switch node: the lifecycle every target's node shares.

Mininet calls start() and stop(); the testbed asks for control() and switch_pid. All of it
is the same for every target: bring the data ports up (Mininet leaves that to a switch's
start()), start the target's data plane on them (``SwitchTarget.data_plane``) with
Mininet's port numbers (``self.ports[intf]``, which the testbed programs as it sees them in
the topology), and stop it again. A target's node says only which target it is and what
its data plane takes beyond the common keywords (``data_plane_options``).

A node runs one protocol's program (``protocol``); ``load`` swaps it for another's by
restarting its data plane on the same ports, the one way every target can (a bmv2, an eBPF
switch and the embedded process alike come back with the new program and empty tables).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Mapping

from mininet.node import Switch

from base.lifetime import ThreadWatch
from switches.control import SwitchControl
from switches.target import DataPlane, SwitchTarget


class TargetSwitch(Switch):
    """A Mininet switch whose data plane runs on its ports in the root namespace (like OVS)."""

    target: ClassVar[SwitchTarget]

    def __init__(
        self,
        name: str,
        *,
        k: int,
        protocol: str | None = None,
        log_dir: Path = Path("/tmp"),
        max_pool_size: int,
        scratch_dir: Path | None = None,
        port_rate_bps: float | None = None,
        port_queue_packets: int | None = None,
        **kwargs: Any,
    ) -> None:
        """The same keywords for every target; a k it is not built for is refused here,
        before the network starts."""
        self.target.check_k(k)
        super().__init__(name, **kwargs)
        self.log_dir = Path(log_dir)
        self.k = k
        self.protocol = protocol
        """The protocol whose program the node runs (None: its target's default program)."""
        self.max_pool_size = max_pool_size
        self.scratch_dir = scratch_dir
        """The network's folder for a data plane's temporary files on this machine (the
        embedded switch's control socket), which its lock records for removal; None: the
        system's temporary folder."""
        self.port_rate_bps = port_rate_bps
        """Its links' rate (bits/s; None: unshaped), for a program that marks congestion by
        the rate its ports drain at (ATP's phantom queues on eBPF, its queue rate on bmv2)."""
        self.port_queue_packets = port_queue_packets
        """The queue limit of its ports' links (packets; None: not given), which a virtual queue
        kept at that rate holds at most (ATP's phantom queues on eBPF)."""
        self._data_plane: DataPlane | None = None

    def data_plane_options(self) -> dict[str, Any]:
        """Keywords of this target's data plane beyond ports, log_dir, name, k, max_pool_size and protocol."""
        return {}

    def portable_data_plane_options(self) -> dict[str, Any]:
        """``data_plane_options`` for the data plane started on another server (network/cluster.py):
        only values that mean the same there, as JSON."""
        return self.data_plane_options()

    def switch_ports(self) -> dict[int, str]:
        """Port number -> interface name for every data interface (not the loopback)."""
        return {self.ports[intf]: intf.name for intf in self.intfList() if intf.name != "lo"}

    def ports_up(self) -> dict[int, str]:
        """Bring every data port up; returns them as ``switch_ports()`` does."""
        ports = self.switch_ports()
        for ifname in ports.values():
            self.cmd("ip", "link", "set", "dev", ifname, "up")
        return ports

    def start(self, controllers: list[Any]) -> None:
        """Run the data plane on this node's ports (Mininet calls this from net.start)."""
        self._data_plane = self.target.data_plane(
            self.ports_up(), self.log_dir, name=self.name, k=self.k, max_pool_size=self.max_pool_size, protocol=self.protocol,
            **self.data_plane_options()
        )
        self._data_plane.start()

    def load(self, protocol: str) -> None:
        """Run ``protocol``'s program instead of the current one: the data plane stopped and
        started again on the same ports, with empty tables and registers (the caller programs it)."""
        self.target.program_of(protocol)  # a protocol the target has no program for is refused before the switch stops
        self._stop_data_plane()
        self.protocol = protocol
        self.start([])

    def _stop_data_plane(self) -> None:
        if self._data_plane is not None:
            self._data_plane.stop()
            self._data_plane = None

    def stop(self, deleteIntfs: bool = True) -> None:  # noqa: N803 (Mininet's signature)
        self._stop_data_plane()
        super().stop(deleteIntfs)

    @property
    def switch_pid(self) -> int | None:
        """Pid of the process doing the switching (None when stopped, or for a target with
        none, like the eBPF switch), for CPU accounting."""
        return None if self._data_plane is None else self._data_plane.pid

    @property
    def switch_pid_on_server(self) -> int | None:
        """``switch_pid`` as the server this node runs on numbers it: the same here; a node
        on another server (network/cluster.py) gives its switch's pid there."""
        return self.switch_pid

    @property
    def switch_threads(self) -> Mapping[str, ThreadWatch]:
        """Threads of the runner this switch needs (``DataPlane.threads``), empty when stopped."""
        return {} if self._data_plane is None else self._data_plane.threads

    def data_plane_problems(self) -> list[str]:
        """What is wrong with the running data plane that its process does not show (``DataPlane.problems``)."""
        return [] if self._data_plane is None else self._data_plane.problems()

    def control(self, command_log: Path | None = None) -> SwitchControl:
        """A control-plane connection to this switch (the caller closes it)."""
        if self._data_plane is None or not self._data_plane.running:
            raise RuntimeError(f"{self.target.name} switch {self.name} is not running (start the network first)")
        return self._data_plane.control(command_log)
