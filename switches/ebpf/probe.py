"""Whether this machine can run the eBPF switch, and if not, why (for --switch and 'auto').

The switch needs clang (to build the program), bpftool (to load it), iproute2's tc (to
attach it), the bpf(2) system call and the clsact qdisc. The last two are asked of the
kernel itself: a one-cell map is created and closed, and a clsact qdisc is added to a
throw-away veth pair, which is deleted again.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from switches.ebpf import NEEDS_ROOT
from switches.ebpf.bpf import probe_bpf_syscall

EXECUTABLES = {"clang": "clang (Debian: clang, llvm)", "bpftool": "bpftool (Debian: bpftool)", "tc": "tc (Debian: iproute2)"}


def _refuses(command: list[str]) -> str | None:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    return None if result.returncode == 0 else (result.stderr or result.stdout).strip()


def _probe_clsact() -> str | None:
    """Why the kernel refuses a clsact qdisc, or None if it takes one."""
    veth = f"smlprobe{os.getpid() % 100000}"
    refused = _refuses(["ip", "link", "add", veth, "type", "veth", "peer", "name", f"{veth}p"])
    if refused:
        return f"cannot create a veth pair to probe clsact: {refused}"
    try:
        refused = _refuses(["tc", "qdisc", "add", "dev", veth, "clsact"])
        return None if refused is None else f"no clsact qdisc (tc says: {refused})"
    finally:
        _refuses(["ip", "link", "del", veth])


@functools.cache
def detect_ebpf() -> tuple[str, ...]:
    """What the eBPF switch lacks here (empty when it can run); asked once per process."""
    missing = [label for name, label in EXECUTABLES.items() if shutil.which(name) is None]
    if os.geteuid() != 0:
        return (*missing, NEEDS_ROOT)
    try:
        probe_bpf_syscall()
    except OSError as error:
        return (*missing, f"the bpf system call ({error.strerror})")
    if shutil.which("tc") is not None:
        refused = _probe_clsact()
        if refused:
            missing.append(refused)
    return tuple(missing)
