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
from switches.control import SwitchControl
from switches.targets import lookup


def testbed(n_hosts: int) -> Testbed:
    """``n_hosts`` namespaces cabled to switch ports 1..n. They resolve the switch's virtual
    address by ARP, as the Mininet hosts do: program it with
    ``programming.program_switch_address`` before a host's kernel sends to it."""
    return Testbed(n_hosts)


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
    *,
    k: int,
    name: str = "switch",
    max_pool_size: int,
    command_log: Path | None = None,
    **options: Any,
) -> Iterator[RunningSwitch]:
    """Start ``target`` on ``ports`` (port number -> interface), yield it, stop it.

    ``options`` are the target's own (``SwitchTarget.options``: the embedded switch's seed,
    log_level, profile, ...). bmv2 runs p4/switchml.p4 and ebpf switches/ebpf/switchml/switchml.bpf.c,
    each compiled for ``max_pool_size`` (cached).
    """
    described = lookup(target)
    described.check_k(k)
    log_dir.mkdir(parents=True, exist_ok=True)  # for the command log, also of a target that writes no log
    switch = described.data_plane(ports, log_dir, name=name, k=k, max_pool_size=max_pool_size, **options)
    switch.start()
    try:
        with switch.control(command_log) as control:
            yield RunningSwitch(control, switch.pid)
    finally:
        switch.stop()
