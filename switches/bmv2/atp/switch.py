"""simple_switch running ATP's program on a set of interfaces, with its control plane.

The same process handling as SwitchML's bmv2 switch (``Bmv2Process``: command line, readiness,
shutdown, log), with atp.json compiled for the run's k and pool size, and no learning
controller: ATP's program forwards ordinary traffic by the hosts the control plane installs.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator, Mapping

from protocol.atp import params
from switches.bmv2.atp.compile import ATPCompileOptions, compile_atp
from switches.bmv2.atp.control import ATPBmv2Control
from switches.bmv2.process import THRIFT_PORT_BASE, Bmv2Process, free_tcp_port


@contextlib.contextmanager
def run_atp_bmv2(
    ports: Mapping[int, str],
    log_dir: Path,
    *,
    k: int,
    pool_size: int = params.DEFAULT_POOL_SIZE,
    name: str = "atp-bmv2",
    device_id: int = 0,
    command_log: Path | None = None,
    **options: Any,
) -> Iterator[tuple[Bmv2Process, ATPBmv2Control]]:
    """Start simple_switch with atp.json on ``ports`` (bmv2 port -> interface), yield it and its
    control plane, stop it. ``options`` are Bmv2Process's (log_level, executable, popen)."""
    json_path = compile_atp(ATPCompileOptions(k=k, pool_size=pool_size))
    thrift_port = free_tcp_port(THRIFT_PORT_BASE + device_id)
    process = Bmv2Process(name=name, json_path=json_path, interfaces=ports, thrift_port=thrift_port, device_id=device_id,
                          log_dir=log_dir, learning=False, **options)
    process.start()
    try:
        with ATPBmv2Control(process.thrift_port, json_path=json_path, command_log=command_log) as control:
            yield process, control
    finally:
        process.stop()
