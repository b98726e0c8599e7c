"""Which switch target a run uses: bmv2 (the P4 program), ebpf (the same data plane in the
kernel) or the embedded software switch.

bmv2 needs three things this machine may lack — simple_switch, p4c and p4-utils (with
bmv2's Thrift bindings); ebpf needs clang, bpftool, tc, root, the bpf system call and the
clsact qdisc (switches/ebpf/probe.py); the embedded switch needs nothing beyond the
project's own packages. ``auto`` therefore picks bmv2 where it can actually run, else ebpf
where the kernel takes it, else the embedded switch, and logs which and why; asking for a
target that cannot run says exactly what is missing instead of failing mid-run.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil

log = logging.getLogger(__name__)

TARGETS = ("auto", "bmv2", "ebpf", "embedded")

BMV2_EXECUTABLES = ("simple_switch", "p4c")
BMV2_PYTHON_MODULES = {
    "p4utils": "p4utils",
    "bm_runtime": "bmv2's Thrift Python bindings (bm_runtime, installed with bmv2)",
    "thrift": "the Thrift Python library (python3-thrift)",
}
"""Importable module -> how to name it when it is missing."""


class TargetUnavailableError(RuntimeError):
    """The requested switch target cannot run on this machine."""


def detect_bmv2() -> list[str]:
    """What bmv2 needs and this machine lacks (empty when bmv2 can run)."""
    missing = [name for name in BMV2_EXECUTABLES if shutil.which(name) is None]
    missing += [label for module, label in BMV2_PYTHON_MODULES.items() if importlib.util.find_spec(module) is None]
    return missing


def detect_ebpf() -> list[str]:
    """What the eBPF switch needs and this machine lacks or refuses (empty when it can run)."""
    from switches.ebpf.probe import detect_ebpf as probe

    return list(probe())


def resolve_target(name: str, needs_delay_line: bool = False) -> str:
    """'auto' | 'bmv2' | 'ebpf' | 'embedded' -> the concrete target.

    ``needs_delay_line``: the links have a delay and the kernel has no netem, so only the
    embedded switch can delay frames; 'auto' then picks it.
    """
    if name not in TARGETS:
        raise ValueError(f"unknown switch target {name!r}; choose one of {', '.join(TARGETS)}")
    if name == "embedded":
        return "embedded"
    if name == "auto" and needs_delay_line:
        log.info("switch target auto -> embedded (the links have a delay, the kernel has no netem: only its delay line can delay frames)")
        return "embedded"
    if name == "ebpf":
        refused = detect_ebpf()
        if refused:
            raise TargetUnavailableError(
                f"switch target 'ebpf' needs {'; '.join(refused)}, which this machine lacks or refuses. "
                "scripts/bootstrap.sh installs the tools; or choose --switch embedded."
            )
        return "ebpf"
    missing = detect_bmv2()
    if name == "bmv2" and missing:
        raise TargetUnavailableError(
            f"switch target 'bmv2' needs {', '.join(missing)}, which this machine lacks. "
            "The Vagrant VM provides all of them: run `vagrant up` in the repository and use the "
            "testbed inside it (see README, 'Switch targets'), or choose --switch embedded."
        )
    if name == "auto" and missing:
        refused = detect_ebpf()
        if not refused:
            log.info("switch target auto -> ebpf (bmv2 lacks: %s)", ", ".join(missing))
            return "ebpf"
        log.info("switch target auto -> embedded (bmv2 lacks: %s; ebpf: %s)", ", ".join(missing), "; ".join(refused))
        return "embedded"
    log.info("switch target auto -> bmv2" if name == "auto" else "switch target bmv2")
    return "bmv2"


def node_class(target: str) -> type:
    """The Mininet switch class of a concrete target (imported only when chosen)."""
    if target == "bmv2":
        from switches.bmv2.node import Bmv2SwitchNode

        return Bmv2SwitchNode
    if target == "embedded":
        from switches.embedded.node import EmbeddedSwitchNode

        return EmbeddedSwitchNode
    if target == "ebpf":
        from switches.ebpf.node import EbpfSwitchNode

        return EbpfSwitchNode
    raise ValueError(f"no switch node class for target {target!r}; resolve_target() it first")
