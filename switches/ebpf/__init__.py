"""The eBPF switch target: docs/dataplane.md as a TC (clsact) program in the kernel.

SwitchML's program is ``switchml/``: ``switchml.bpf.c`` is the data plane (read it beside
p4/switchml/include/ingress.p4 and switches/embedded/switchml/ingress.py), ``compile.py`` builds it with clang,
``datapath.py`` loads it onto a switch's ports and takes it off, ``control.py`` programs it
through the common control-plane interface over its BPF maps (``maps.py``). The target's own
files serve any program: ``tc_switch.h`` (the C every program includes), ``bpf.py`` (the
bpf(2) calls), ``probe.py`` says whether this machine can run it, ``stats.py`` reads its run
time, and ``node.py`` is its Mininet switch.

As a switch target (``TARGET`` below, a switches/target.py descriptor) it is compiled for
the k (any of params.K_CHOICES) and the pool size it is given, one cached object each, and
``auto`` prefers it to the embedded switch where the kernel takes it (probe.py)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from base.plugin import resolve
from base.tool_version import first_line
from protocol.switchml import params
from switches.target import CpuReader, DataPlane, SwitchTarget


PROGRAMS: dict[str, str] = {
    "switchml": "switches.ebpf.switchml.datapath:EbpfDataPlane",
    "atp": "switches.ebpf.atp.datapath:data_plane",
}
"""Protocol -> "module:attribute" of its data plane, ``cls(ports, *, name, k, max_pool_size)``:
its TC program built for k and pool size and attached to the ports, one line each."""
PACED_BY_LINK_RATE = frozenset({"atp"})
"""Protocols whose data plane also takes its ports' link rate and queue limit (``port_rate_bps``,
``port_queue_packets``): ATP's phantom queues drain at the one and hold at most the other to
mark ECN (TC sees no queue of its own)."""
ORPHANED_PINS = ("switches.ebpf.switchml.datapath:remove_orphaned_pins", "switches.ebpf.atp.datapath:remove_orphaned_pins")
"""Each program's cleanup of the pins a loader killed while loading left behind."""

NEEDS_ROOT = "root (loading BPF programs and attaching them to ports needs it)"
"""What a process that is not root lacks; only root can ask the kernel the rest (probe.py)."""


@dataclass(frozen=True)
class EbpfTarget(SwitchTarget):
    """The eBPF switch: a TC program on each port, built per k and pool size."""

    def detect(self) -> list[str]:
        """What the eBPF switch needs and this machine lacks or refuses (empty when it can run)."""
        from switches.ebpf.probe import detect_ebpf

        return list(detect_ebpf())

    def data_plane(self, ports: Mapping[int, str], log_dir: Path, *, name: str, k: int, max_pool_size: int,
                   protocol: str | None = None, port_rate_bps: float | None = None, port_queue_packets: int | None = None,
                   **options: Any) -> DataPlane:
        """``protocol``'s program (``PROGRAMS``) built for ``k`` and ``max_pool_size`` on ``ports``' tc
        ingress hooks, given the ports' link rate and queue limit where it paces by them (``PACED_BY_LINK_RATE``).
        ``log_dir`` is the common signature's: the data plane writes no log (its counters are maps)."""
        paced = ({"port_rate_bps": port_rate_bps, "port_queue_packets": port_queue_packets}
                 if (protocol or self.default_protocol) in PACED_BY_LINK_RATE else {})
        return resolve(self.program_of(protocol))(ports, name=name, k=k, max_pool_size=max_pool_size, **paced)

    def remove_leftovers(self) -> list[str]:
        """Pins of a loader killed while loading (a running switch's go with its interfaces)."""
        return [f"BPF pins {directory}" for remove in ORPHANED_PINS for directory in resolve(remove)()]

    @contextlib.contextmanager
    def cpu_meter(self, pid: int | None, interfaces: Sequence[str]) -> Iterator[CpuReader]:
        """(0, seconds) the switch's program has run so far on its ports (softirq time, as
        system time), from the kernel's BPF run-time statistics, enabled while open."""
        from switches.ebpf.stats import attached_program_id, bpf_stats_enabled, program_run

        program_id = attached_program_id(interfaces[0])
        with bpf_stats_enabled():
            yield lambda: (0.0, program_run(program_id)[0])

    def describe_build(self) -> str:
        return f"switchml.bpf.c and atp.bpf.c, kernel {os.uname().release}"

    def tool_versions(self) -> dict[str, str | None]:
        return {"clang": first_line(["clang", "--version"])}


TARGET = EbpfTarget(
    name="ebpf",
    needs="clang, bpftool, tc, root, the bpf system call and the clsact qdisc",
    node="switches.ebpf.node:EbpfSwitchNode",
    auto_preference=2,
    remedy="scripts/bootstrap.sh installs the tools; or choose --switch embedded.",
    refusable=True,
    program="eBPF program",
    protocols=frozenset(PROGRAMS),
    programs=PROGRAMS,
    k_choices=params.K_CHOICES,
    root_to_tell=NEEDS_ROOT,
    link_rates={32: 3.5, 64: 8.0, 128: 10.0, 256: 10.0},  # benchmarks/README.md: "The main job", "Emulation capacity", "Per k"
)
