"""simple_switch running ATP's program on a set of interfaces, with its control plane.

The same process handling as SwitchML's bmv2 switch (``Bmv2Process``: command line, readiness,
shutdown, log), with atp.json compiled for the run's k and pool size, ``ATPBmv2Control`` as its
control plane, and no learning controller: ATP's program forwards ordinary traffic by the
hosts the control plane installs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator, Mapping

from protocol.atp import params
from switches.bmv2.atp.compile import ATPCompileOptions, compile_atp
from switches.bmv2.atp.control import ATPBmv2Control
from switches.bmv2.process import THRIFT_PORT_BASE, Bmv2Process, free_tcp_port


class ATPBmv2Process(Bmv2Process):
    """One simple_switch running p4/atp/atp.p4 (a DataPlane, as SwitchML's Bmv2Process)."""

    @classmethod
    def for_atp(
        cls,
        ports: Mapping[int, str],
        log_dir: Path,
        *,
        name: str,
        k: int,
        pool_size: int = params.DEFAULT_POOL_SIZE,
        device_id: int = 0,
        thrift_port: int | None = None,
        **options: Any,
    ) -> "ATPBmv2Process":
        """simple_switch on ``ports`` (bmv2 port -> interface) with atp.json for ``k`` and
        ``pool_size`` (compiled and cached on first use); the Thrift port is 9090 + ``device_id``
        unless taken or given. ``options`` are Bmv2Process's (log_level, executable, popen)."""
        return cls(
            name=name,
            json_path=compile_atp(ATPCompileOptions(k=k, pool_size=pool_size)),
            interfaces=ports,
            thrift_port=free_tcp_port(THRIFT_PORT_BASE + device_id) if thrift_port is None else thrift_port,
            device_id=device_id,
            log_dir=log_dir,
            learning=False,
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
