"""Load SwitchML's eBPF program onto a switch's ports and take it off again, leaving nothing behind.

switches/ebpf/loader.py does it for every program of the target (build, ``bpftool prog
loadall``, port wiring, tc attach, unpinning, detach; the lifecycle and cleanup are
described there and in switches/ebpf/README.md); ``EbpfDataPlane`` gives it SwitchML's
build for k and the pool size, its program and pin folder, and its control plane.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

from protocol.switchml import params
from switches.ebpf import loader
from switches.ebpf.loader import BPFFS, TcDataPlane
from switches.ebpf.switchml.compile import CompileOptions, compile_program
from switches.ebpf.switchml.control import EbpfControl

PIN_ROOT = BPFFS / "switchml"
PROGRAM = "switchml_ingress"
"""The program's function name in switchml.bpf.c (bpftool pins it under that name)."""


def remove_orphaned_pins() -> list[Path]:
    """Remove SwitchML's pin directories whose owner process is gone (killed while loading); which."""
    return loader.remove_orphaned_pins(PIN_ROOT)


class EbpfDataPlane(TcDataPlane):
    """The SwitchML program on a set of ports (port number -> interface), in this kernel."""

    program = PROGRAM
    pin_root = PIN_ROOT

    def __init__(
        self, ports: Mapping[int, str], *, k: int, name: str = "switch", max_pool_size: int = params.MAX_POOL_SIZE
    ) -> None:
        super().__init__(ports, name=name)
        self.k = k
        self.max_pool_size = max_pool_size

    def build(self) -> Path:
        return compile_program(CompileOptions(max_pool_size=self.max_pool_size, k=self.k))

    def describe(self) -> str:
        return f"k = {self.k}"

    def control(self, command_log: Path | None = None) -> EbpfControl:
        if not self.running:
            raise RuntimeError(f"eBPF switch {self.name} is not running")
        return EbpfControl(self.map_ids, self.k, command_log)
