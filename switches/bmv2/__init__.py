"""The bmv2 target: a protocol's P4 program compiled by p4c, run by simple_switch, programmed over Thrift.

As a switch target (``TARGET`` below, a switches/target.py descriptor) it runs the P4
build's k and at most its pool size, and ``auto`` prefers it wherever everything it needs
is installed (most machines lack it: the Vagrant VM has it). ``PROGRAMS`` lists the P4
program of each protocol it runs (``switchml/``: p4/switchml.p4)."""

from __future__ import annotations

import importlib.util
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from base.plugin import resolve
from base.tool_version import first_line
from protocol.switchml import params
from switches.target import DataPlane, PortQueueLimit, SwitchTarget, Toolchain

if TYPE_CHECKING:
    from switches.bmv2.compile import P4Program

PROGRAMS: dict[str, str] = {
    "switchml": "switches.bmv2.switchml.program:PROGRAM",
    "atp": "switches.bmv2.atp.program:PROGRAM",
}
"""Protocol -> "module:attribute" of its ``P4Program`` (switches/bmv2/compile.py: its source,
build, digest controller and simple_switch process class): the in-network aggregation
protocols this target runs, one line each."""


def program_for(protocol: str | None = None) -> "P4Program":
    """``protocol``'s P4 program; None: the target's default protocol's."""
    return resolve(TARGET.program_of(protocol))

EXECUTABLES = ("simple_switch", "p4c")
PYTHON_MODULES = {
    "p4utils": "p4utils",
    "bm_runtime": "bmv2's Thrift Python bindings (bm_runtime, installed with bmv2)",
    "thrift": "the Thrift Python library (python3-thrift)",
}
"""Importable module -> how to name it when it is missing."""
COMPILER_VARIABLES = ("P4C_16_INCLUDE_PATH",)
"""What p4c reads of its environment: where its P4 includes (core.p4, v1model.p4) are, when it
is installed somewhere else than it was built for (a prebuilt copy)."""


SEND_BUFFER_SYSCTL = Path("/proc/sys/net/core/wmem_default")
FRAME_TRUESIZE_BYTES = 2304
"""What one full 1,514-byte frame waiting in a qdisc charges to the packet socket that sent
it (measured: 95 such frames fill a 212,992-byte send buffer, 2,242 bytes each)."""


@dataclass(frozen=True)
class Bmv2Target(SwitchTarget):
    """bmv2's simple_switch running the P4 program, compiled per k and pool size."""

    def detect(self) -> list[str]:
        """What bmv2 needs and this machine lacks (empty when bmv2 can run)."""
        missing = [name for name in EXECUTABLES if shutil.which(name) is None]
        missing += [label for module, label in PYTHON_MODULES.items() if importlib.util.find_spec(module) is None]
        return missing

    def toolchain(self) -> Toolchain:
        """Where simple_switch and p4c were found on PATH, the PYTHONPATH folders the Python modules
        bmv2 needs were imported from (those the interpreter finds by itself it finds anywhere),
        and p4c's variables."""
        executables = dict.fromkeys(Path(found).resolve().parent for name in EXECUTABLES if (found := shutil.which(name)))
        pythonpath = {Path(entry).resolve() for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry}
        python = {}
        for module in PYTHON_MODULES:
            spec = importlib.util.find_spec(module)
            if spec is not None and spec.origin:  # a package's origin is its __init__.py: its sys.path entry is two up
                origin = Path(spec.origin).resolve()
                folder = origin.parent.parent if spec.submodule_search_locations else origin.parent
                if folder in pythonpath:
                    python[folder] = None
        return Toolchain(tuple(executables), tuple(python), {name: os.environ[name] for name in COMPILER_VARIABLES if name in os.environ})

    def port_queue_limit(self) -> PortQueueLimit:
        """As many full frames as a port's send buffer holds.

        simple_switch sends through one blocking packet socket per port (libpcap), with the
        kernel's default send buffer (net.core.wmem_default; global, not per namespace, and
        bmv2 has no option for it). A frame waiting in the port's qdisc still counts against
        that buffer, so once a port's queue holds more, bmv2's transmit blocks on that port and
        every other port's frames wait behind it, until bmv2's own queues drop them uncounted.
        Measured on the parameter server's main job at 2 Mbit/s (8 ranks, all-to-all incast):
        with 200-packet queues 6,454 frames vanished between bmv2's ingress and egress and the
        job took 42-53 s; with 90 or 60, none did (2,200-3,200 counted qdisc drops instead, at
        the port the incast converges on) and it took 37-38 s."""
        buffer_bytes = int(SEND_BUFFER_SYSCTL.read_text())
        return PortQueueLimit(
            packets=buffer_bytes // FRAME_TRUESIZE_BYTES,
            why=f"bmv2's port socket holds {buffer_bytes // FRAME_TRUESIZE_BYTES} full frames "
                f"(net.core.wmem_default = {buffer_bytes}); a deeper queue stalls every port",
        )

    def build(self, protocol: str | None, k: int, max_pool_size: int) -> Path:
        """``protocol``'s P4 program (None: the default one) compiled for ``k`` and ``max_pool_size``: its JSON (cached)."""
        from switches.bmv2.compile import CompileOptions, compile_p4

        return compile_p4(CompileOptions(program=program_for(protocol), k=k, max_pool_size=max_pool_size))

    def data_plane(self, ports: Mapping[int, str], log_dir: Path, *, name: str, k: int, max_pool_size: int,
                   protocol: str | None = None, **options: Any) -> DataPlane:
        """simple_switch running ``protocol``'s program on ``ports``, as its program's process class
        (``P4Program.process``) starts it (``options``: that class's ``for_ports``'s; a ``json_path``
        given there runs that prebuilt program instead)."""
        json_path = options.pop("json_path", None) or self.build(protocol, k, max_pool_size)
        process = resolve(program_for(protocol).process)
        return process.for_ports(ports, log_dir, name=name, k=k, max_pool_size=max_pool_size, json_path=json_path, protocol=protocol,
                                 **options)

    def describe_build(self) -> str:
        return shutil.which("simple_switch") or "simple_switch"

    def tool_versions(self) -> dict[str, str | None]:
        return {"simple_switch": first_line(["simple_switch", "--version"]), "p4c": first_line(["p4c", "--version"])}


TARGET = Bmv2Target(
    name="bmv2",
    needs="simple_switch, p4c and p4-utils with bmv2's Thrift bindings",
    node="switches.bmv2.node:Bmv2SwitchNode",
    auto_preference=1,
    remedy=("The Vagrant VM provides all of them: run `vagrant up` in the repository and use the testbed inside it "
            "(see docs/targets.md), or choose --switch embedded."),
    program="P4 program",
    protocols=frozenset(PROGRAMS),
    programs=PROGRAMS,
    k_choices=params.K_CHOICES,
    max_pool_size=params.MAX_POOL_SIZE,
    link_rates={32: 0.5, 64: 1.0, 256: 1.5},  # benchmarks/README.md: "The main job", "Emulation capacity", "Per k"
)
