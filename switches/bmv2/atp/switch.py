"""simple_switch running ATP's program on a set of interfaces, with its control plane.

The same process handling as SwitchML's bmv2 switch (``Bmv2Process``: command line, readiness,
shutdown, log), with atp.json compiled for the run's k and pool size, ``ATPBmv2Control`` as its
control plane, and no learning controller: ATP's program forwards ordinary traffic by the
hosts the control plane installs.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from protocol.atp import params
from protocol.atp.packet import frame_bytes
from switches.bmv2.atp.program import PROGRAM
from switches.bmv2.compile import CompileOptions, compile_p4
from switches.bmv2.atp.control import ATPBmv2Control, packets_per_second
from switches.bmv2.process import START_TIMEOUT_S, Bmv2Process, kernel_tcp_port

PORT_QUEUE_PACKETS = 64
"""Each port's egress queue depth on a network that gives no queue limit: bmv2's default, which
the rate does not change. No copy can see it as deep as ATP's default ecn_threshold, the same
64: a copy's deq_qdepth counts those left behind it, at most the depth less one (measured: a
queue 8 deep marks the first copy of a burst at threshold 7, none at 8)."""


@dataclass
class ATPBmv2Process(Bmv2Process):
    """One simple_switch running p4/atp.p4 (a DataPlane, as SwitchML's Bmv2Process); on a
    network, each port's egress queue drains at its link's rate, so that ECN marks where the
    link is the bottleneck (switches/bmv2/atp/control.py)."""

    port_rate_bps: float | None = None
    """Every port's link rate (None: bmv2's default, which queues nothing and never marks)."""
    port_queue_packets: int | None = None
    """Every port's link queue limit (the network's, as its qdiscs are cut; None: PORT_QUEUE_PACKETS):
    the depth of bmv2's queue, which drains at the link rate and so holds what the link would."""
    frame_bytes: int = 0
    """An ATP frame's bytes at the program's k: what the queue's rate is counted in."""

    @classmethod
    def for_ports(cls, ports: Mapping[int, str], log_dir: Path, *, name: str, k: int, max_pool_size: int,
                  json_path: Path | None = None, device_id: int = 0, thrift_port: int | None = None,
                  port_rate_bps: float | None = None, port_queue_packets: int | None = None, protocol: str | None = None,
                  **options: Any) -> "ATPBmv2Process":
        """The target's data plane for ATP (``PROGRAM.process``): ``for_atp`` with the switch's pool as
        the aggregators (``json_path``: the node's compiled program) and its links' rate and queue limit."""
        process = cls.for_atp(ports, log_dir, name=name, k=k, pool_size=max_pool_size, json_path=json_path, device_id=device_id,
                              thrift_port=thrift_port, **options)
        process.port_rate_bps, process.port_queue_packets, process.frame_bytes = port_rate_bps, port_queue_packets, frame_bytes(k)
        return process

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """simple_switch started, then every port's queue set to drain at its link's rate and hold what its link's queue holds."""
        super().start(timeout_s)
        if self.port_rate_bps:
            depth = self.port_queue_packets or PORT_QUEUE_PACKETS
            with self.control() as control:
                for port in self.interfaces:
                    control.set_port_queue(port, packets_per_second(self.port_rate_bps, self.frame_bytes), depth)

    @classmethod
    def for_atp(
        cls,
        ports: Mapping[int, str],
        log_dir: Path,
        *,
        name: str,
        k: int,
        pool_size: int = params.DEFAULT_POOL_SIZE,
        json_path: Path | None = None,
        device_id: int = 0,
        thrift_port: int | None = None,
        **options: Any,
    ) -> "ATPBmv2Process":
        """simple_switch on ``ports`` (bmv2 port -> interface) with atp.json for ``k`` and
        ``pool_size`` (compiled and cached on first use; ``json_path``: a prebuilt one); the
        Thrift port is one the kernel picks unless given (as Bmv2Process.for_ports). ``options`` are Bmv2Process's (log_level, executable, popen)."""
        return cls(
            name=name,
            json_path=json_path or compile_p4(CompileOptions(program=PROGRAM, k=k, max_pool_size=pool_size)),
            program=PROGRAM,
            interfaces=ports,
            thrift_port=kernel_tcp_port() if thrift_port is None else thrift_port,
            device_id=device_id,
            log_dir=log_dir,
            **options,
        )

    def control_class(self) -> type[ATPBmv2Control]:
        return ATPBmv2Control


@contextlib.contextmanager
def run_atp_bmv2(
    ports: Mapping[int, str], log_dir: Path, *, k: int, pool_size: int = params.DEFAULT_POOL_SIZE, name: str = "atp-bmv2",
    command_log: Path | None = None, **options: Any,
) -> Iterator[tuple[ATPBmv2Process, ATPBmv2Control]]:
    """Start ATP's simple_switch (``ATPBmv2Process.for_atp``), yield it and its control plane, stop it."""
    process = ATPBmv2Process.for_atp(ports, log_dir, name=name, k=k, pool_size=pool_size, **options)
    process.start()
    try:
        with process.control(command_log) as control:
            yield process, control
    finally:
        process.stop()
