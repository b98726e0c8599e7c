"""What every target's Mininet switch node shares: its data ports, numbered as Mininet does.

The testbed programs the port numbers it sees in the topology, so every target's node
hands its data plane Mininet's numbering (``self.ports[intf]``), and brings its ports up
itself (Mininet leaves that to a switch's start()).
"""

from __future__ import annotations

from mininet.node import Switch


class TargetSwitch(Switch):
    """A Mininet switch whose data plane runs on its ports in the root namespace (like OVS)."""

    def switch_ports(self) -> dict[int, str]:
        """Port number -> interface name for every data interface (not the loopback)."""
        return {self.ports[intf]: intf.name for intf in self.intfList() if intf.name != "lo"}

    def ports_up(self) -> dict[int, str]:
        """Bring every data port up; returns them as ``switch_ports()`` does."""
        ports = self.switch_ports()
        for ifname in ports.values():
            self.cmd("ip", "link", "set", "dev", ifname, "up")
        return ports
