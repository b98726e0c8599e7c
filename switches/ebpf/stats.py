"""CPU time of the eBPF switch: its program's run time, from the kernel's BPF statistics.

The switch has no process whose CPU time /proc could show: it runs in the softirq of
whichever core received a frame. With ``kernel.bpf_stats_enabled`` set the kernel adds up
every run of every program (run_time_ns, run_cnt); the program's time includes what its
helpers do, so the cost of each result copy (bpf_clone_redirect into the port's qdisc and
the veth) is in it, the receiving hosts' processing of that copy is not.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path
from typing import Iterator

BPF_STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")


@contextlib.contextmanager
def bpf_stats_enabled() -> Iterator[None]:
    """Let the kernel account programs' run time (a little overhead per run) for the body."""
    before = BPF_STATS_SYSCTL.read_text().strip()
    BPF_STATS_SYSCTL.write_text("1")
    try:
        yield
    finally:
        BPF_STATS_SYSCTL.write_text(before)


def attached_program_id(ifname: str) -> int:
    """Id of the BPF program attached to ``ifname``'s ingress (the switch's, on its port)."""
    shown = subprocess.run(["tc", "-json", "filter", "show", "dev", ifname, "ingress"], capture_output=True, text=True, check=True)
    for entry in json.loads(shown.stdout or "[]"):
        program = entry.get("options", {}).get("prog")
        if program:
            return int(program["id"])
    raise LookupError(f"no BPF program on {ifname}'s ingress")


def program_run(program_id: int) -> tuple[float, int]:
    """(seconds run, runs) of a program since stats were enabled (0 while disabled)."""
    shown = subprocess.run(["bpftool", "prog", "show", "id", str(program_id), "--json"], capture_output=True, text=True, check=True)
    info = json.loads(shown.stdout)
    return info.get("run_time_ns", 0) / 1e9, info.get("run_cnt", 0)
