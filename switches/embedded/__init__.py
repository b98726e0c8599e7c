"""The embedded software switch: a Python model of p4/switchml.p4 that owns real ports.

It runs as its own process (``python -m switches.embedded``), reads and writes frames on
Linux interfaces through AF_PACKET sockets, and is programmed through the same
``SwitchControl`` vocabulary as bmv2. Each protocol's program is a folder of its own,
control by control as its data-plane document names them (``switchml/``: docs/dataplane.md;
``atp/``: docs/dataplane-atp.md); this folder holds what they share (``parser``: the
address headers; ``traffic_manager``, ``tables``, ``registers``, ``checksum``), ``switch``
(the port I/O loop) and ``control_server`` (the runtime API, switches/remote_control.py's protocol).

As a switch target (``TARGET`` below, a switches/target.py descriptor) it runs wherever
this repository's Python packages do, with any k and pool size, and is the only target
with a delay line (``--link-delay-ms``), which emulates link delay where the kernel has no
netem. Its pipeline is also the simulator's switch (``simulated``: run_experiment.py
--simulate). It runs one protocol's program at a time, the one its process was started with
(``PROGRAMS``: SwitchML's pipeline, and each other protocol's as one line)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from base.plugin import resolve
from switches.target import DataPlane, SimulatedSwitch, SwitchTarget


PROGRAMS: dict[str, str] = {
    "switchml": "switches.embedded.switchml.pipeline:SwitchMLPipeline",
    "atp": "switches.embedded.atp.simulated:ATPSwitch",
}
"""Protocol -> "module:attribute" of its program class as the switch process runs it
(program.py's ``PortProgram``, ``cls(k=, max_pool_size=, seed=)``): one line each; the first
is what a switch runs when no job needs a protocol."""

SIMULATED_PROGRAMS: dict[str, str] = {
    "switchml": "switches.embedded.switchml.simulated:PipelineSwitch",
    "atp": "switches.embedded.atp.simulated:ATPSwitch",
}
"""Protocol -> "module:attribute" of its program as a ``SimulatedSwitch``, ``cls(*, k,
max_pool_size, seed)``: the in-network aggregation protocols this target runs, one line each."""


@dataclass(frozen=True)
class EmbeddedTarget(SwitchTarget):
    """The embedded Python switch: any k and pool size, a delay line, and a simulated twin."""

    def data_plane(self, ports: Mapping[int, str], log_dir: Path, *, name: str, k: int, max_pool_size: int,
                   protocol: str | None = None, **options: Any) -> DataPlane:
        """``python -m switches.embedded`` running ``protocol``'s program (``PROGRAMS``) on ``ports``;
        ``options`` as EmbeddedSwitchProcess takes them."""
        from switches.embedded.launcher import EmbeddedSwitchProcess

        return EmbeddedSwitchProcess(ports, log_dir, name=name, program=self.program_of(protocol), k=k, max_pool_size=max_pool_size,
                                     **options)

    def remove_leftovers(self) -> list[str]:
        from switches.embedded.launcher import remove_stale_socket_dirs

        return remove_stale_socket_dirs()

    def simulated(self, *, k: int, max_pool_size: int, seed: int | None = None, protocol: str | None = None) -> SimulatedSwitch:
        """``protocol``'s program in a simulation (``SIMULATED_PROGRAMS``; None: the default protocol's)."""
        return resolve(SIMULATED_PROGRAMS[self.default_protocol if protocol is None else protocol])(k=k, max_pool_size=max_pool_size,
                                                                                                   seed=seed)

    def describe_build(self) -> str:
        return f"python {sys.version.split()[0]}"


TARGET = EmbeddedTarget(
    name="embedded",
    needs="nothing beyond this repository's Python packages",
    node="switches.embedded.node:EmbeddedSwitchNode",
    auto_preference=3,
    delays_frames=True,
    protocols=frozenset(SIMULATED_PROGRAMS),
    programs=PROGRAMS,
    options=frozenset({"seed", "log_level", "profile", "link_delay_ms", "scratch_dir"}),
    link_rates={32: 2.5, 64: 5.0, 256: 7.5},  # benchmarks/README.md: "The main job", "Emulation capacity", "Per k"
)
