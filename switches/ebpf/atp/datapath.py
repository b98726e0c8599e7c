"""Load ATP's eBPF program onto a switch's ports (switches/ebpf/loader.py does the lifecycle).

``AtpEbpfDataPlane`` gives the loader ATP's build for k and the pool size, its program and
pin folder, writes ecn_threshold's default (the kernel creates maps zeroed, and 0 would turn
marking off) and, given the ports' link rate and queue limit, each port's phantom queue, and
opens ATP's control plane. Without a rate a port's phantom queue never marks, until the
control plane sets one (AtpEbpfControl.set_phantom_queue).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from protocol.atp import params
from switches.ebpf import loader
from switches.ebpf.atp import maps
from switches.ebpf.atp.compile import CompileOptions, compile_program
from switches.ebpf.atp.control import AtpEbpfControl
from switches.ebpf.bpf import BPF_F_LOCK, BpfMap
from switches.ebpf.map_control import ZERO, u32_key

PIN_ROOT = loader.BPFFS / "atp"
PROGRAM = "atp_ingress"
"""The program's function name in atp.bpf.c."""


def remove_orphaned_pins() -> list[Path]:
    """Remove ATP's pin directories whose owner process is gone (killed while loading); which."""
    return loader.remove_orphaned_pins(PIN_ROOT)


def data_plane(ports: Mapping[int, str], *, name: str, k: int, max_pool_size: int, port_rate_bps: float | None,
               port_queue_packets: int | None = None) -> AtpEbpfDataPlane:
    """ATP's line of the target's ``PROGRAMS``: its program on a network switch's ports, with as
    many aggregators as the switch's pool and each port's phantom queue draining at its link's
    rate and holding what its link's queue holds."""
    return AtpEbpfDataPlane(ports, name=name, k=k, pool_size=max_pool_size, port_rate_bps=port_rate_bps,
                            port_queue_packets=port_queue_packets)


class AtpEbpfDataPlane(loader.TcDataPlane):
    """ATP's program on a set of ports (port number -> interface), in this kernel."""

    program = PROGRAM
    pin_root = PIN_ROOT
    ecn_marked_by = "phantom queue"
    """What marks ECN on this target, for the results to record beside EGV_ECN_MARKED: a
    virtual queue per egress port draining at the port's link rate (TC sees no queue of its own)."""

    def __init__(self, ports: Mapping[int, str], *, k: int, pool_size: int = params.DEFAULT_POOL_SIZE,
                 name: str = "switch", port_rate_bps: float | None = None, port_queue_packets: int | None = None) -> None:
        super().__init__(ports, name=name)
        if port_rate_bps and not port_queue_packets:
            raise ValueError("a phantom queue draining at the ports' rate needs their queue's limit (port_queue_packets)")
        self.k = k
        self.pool_size = pool_size
        self.port_rate_bps = port_rate_bps
        """Every port's link rate, at which its phantom queue drains (None: no phantom queue)."""
        self.port_queue_packets = port_queue_packets
        """Every port's queue limit (the link's ``queue_packets``): what its phantom queue holds at most."""

    def build(self) -> Path:
        return compile_program(CompileOptions(k=self.k, pool_size=self.pool_size))

    def describe(self) -> str:
        return f"ATP, k = {self.k}, {self.pool_size} aggregators"

    def configure(self, opened: Mapping[str, BpfMap]) -> None:
        opened[maps.ECN_THRESHOLD_MAP].update(ZERO, bytes(maps.Threshold(params.DEFAULT_ECN_THRESHOLD)))
        if self.port_rate_bps:
            queue = bytes(maps.PhantomQueue(rate_kbps=maps.phantom_queue_rate(self.port_rate_bps), limit=self.port_queue_packets))
            for port in self.ports:
                opened[maps.PHANTOM_QUEUE_MAP].update(u32_key(port), queue, BPF_F_LOCK)

    def control(self, command_log: Path | None = None) -> AtpEbpfControl:
        if not self.running:
            raise RuntimeError(f"eBPF switch {self.name} is not running")
        return AtpEbpfControl(self.map_ids, self.k, command_log)
