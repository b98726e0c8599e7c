"""A switch target on a set of interfaces, outside Mininet: for the packet-level tests and the
benchmarks, which cable namespaces to veth pairs themselves (``testbed``, base/netns.py).

Every target starts the same way and gives back the same two things, so a test or a
benchmark is written once for every target: the control plane, and the pid of the process
doing the switching (whose CPU time a benchmark reads; the eBPF switch has no process).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from base.netns import Testbed
from protocol import params
from switches.control import SwitchControl

TARGETS = ("embedded", "bmv2", "ebpf")


def testbed(n_hosts: int) -> Testbed:
    """``n_hosts`` namespaces cabled to switch ports 1..n, each knowing the switch's virtual
    address (a static ARP entry, as the Mininet hosts get)."""
    return Testbed(n_hosts, neighbours={params.SWITCH_IPV4: params.SWITCH_MAC})


@dataclass(frozen=True)
class RunningSwitch:
    control: SwitchControl
    pid: int | None
    """The switching process; None for the eBPF switch, which has none: its work is
    softirq time of whichever core received the frame."""


@contextlib.contextmanager
def run_switch(
    target: str,
    ports: Mapping[int, str],
    log_dir: Path,
    name: str = "switch",
    max_pool_size: int = params.MAX_POOL_SIZE,
    command_log: Path | None = None,
    **embedded_options: Any,
) -> Iterator[RunningSwitch]:
    """Start ``target`` on ``ports`` (port number -> interface), yield it, stop it.

    ``embedded_options`` go to the embedded switch (seed, log_level, profile, ...); bmv2 runs
    p4/switchml.p4 compiled for ``max_pool_size`` (cached), with its L2 learning controller;
    ebpf loads switches/ebpf/switchml.bpf.c, compiled for ``max_pool_size`` (cached), onto
    the ports' tc ingress hooks.
    """
    if target == "embedded":
        from switches.embedded.launcher import EmbeddedSwitchProcess

        embedded = EmbeddedSwitchProcess(ports, log_dir, name=name, max_pool_size=max_pool_size, **embedded_options)
        embedded.start()
        try:
            with embedded.control(command_log) as control:
                yield RunningSwitch(control, embedded.pid)
        finally:
            embedded.stop()
    elif target == "bmv2":
        from switches.bmv2.compile import CompileOptions, compile_p4
        from switches.bmv2.control import Bmv2Control
        from switches.bmv2.node import THRIFT_PORT_BASE
        from switches.bmv2.process import Bmv2Process, Bmv2StartError, free_tcp_port

        json_path = compile_p4(CompileOptions(max_pool_size=max_pool_size))
        bmv2 = Bmv2Process(
            name=name, json_path=json_path, interfaces=ports, thrift_port=free_tcp_port(THRIFT_PORT_BASE), device_id=0, log_dir=log_dir
        )
        bmv2.start()
        try:
            with Bmv2Control(bmv2.thrift_port, json_path=json_path, command_log=command_log) as control:
                if bmv2.pid is None:
                    raise Bmv2StartError(f"{name}: simple_switch exited right after starting:\n{bmv2.log_tail()}")
                yield RunningSwitch(control, bmv2.pid)
        finally:
            bmv2.stop()
    elif target == "ebpf":
        from switches.ebpf.datapath import EbpfDataPlane

        log_dir.mkdir(parents=True, exist_ok=True)  # for the command log: the data plane writes none
        ebpf = EbpfDataPlane(ports, name=name, max_pool_size=max_pool_size)
        ebpf.start()
        try:
            with ebpf.control(command_log) as control:
                yield RunningSwitch(control, None)
        finally:
            ebpf.stop()
    else:
        raise ValueError(f"no standalone switch target {target!r}; choose one of {', '.join(TARGETS)}")
