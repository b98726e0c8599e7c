"""What the runner measures around one job, whatever the job is (a repetition, a training).

CPU time of every worker and switch process and the machine's busy share (kept_up), the
switches' transmit rates, their event counters, and the accounting of every frame they
handled (network/port_counters.py). ``ExperimentRunner`` and ``TrainingRunner`` both time
their jobs with one ``JobMeter``, so the fidelity columns mean the same in every run.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from experiments.results import MACHINE
from network.emulation import EmulatedNetwork
from network.port_counters import SETTLE_S, account_switch, read_ports
from switches import programming

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (from /proc), 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def machine_jiffies() -> tuple[int, int]:
    """(busy, total) CPU time of all cores so far, in clock ticks (idle and iowait are not busy)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def interface_bytes(name: str) -> int:
    """Bytes the switch has transmitted on one of its (root-namespace) interfaces."""
    return int(Path(f"/sys/class/net/{name}/statistics/tx_bytes").read_text())


@dataclass(frozen=True)
class JobMeasurement:
    cpu_busy: dict[str, float]
    """Share of one core per process name, and the machine's busy share of all cores (MACHINE)."""
    tx_mbps: dict[str, float]
    """Transmit rate of every switch port over the job."""
    counters: dict[str, dict[str, int]]
    """Every switch's event counters for the job, by counter name."""
    frames: dict[str, dict[str, int]]
    """Every switch's frame accounting for the job (port_counters.account_switch)."""


class JobMeter:
    """``start()`` before the job, ``stop()`` after it; the switches' counters are reset at start."""

    def __init__(self, net: EmulatedNetwork, processes: Mapping[str, int]) -> None:
        self._net = net
        self._processes = dict(processes)
        self._ports = {sw.name: [i.name for i in sw.intfList() if i.name != "lo"] for sw in net.net.switches}
        self._interfaces = [i for intfs in self._ports.values() for i in intfs]

    def start(self) -> None:
        for control in self._net.controls.values():
            programming.reset_event_counters(control)
        self._cpu = {name: cpu_seconds(pid) for name, pid in self._processes.items()}
        self._machine = machine_jiffies()
        self._tx = {i: interface_bytes(i) for i in self._interfaces}
        self._port_counters = read_ports(self._interfaces)
        self._t0 = time.monotonic()

    def stop(self) -> JobMeasurement:
        wall = time.monotonic() - self._t0
        cpu = {name: (cpu_seconds(pid) - self._cpu[name]) / wall for name, pid in self._processes.items()}
        busy, total = machine_jiffies()
        cpu[MACHINE] = (busy - self._machine[0]) / max(1, total - self._machine[1])
        tx_mbps = {i: (interface_bytes(i) - self._tx[i]) * 8 / wall / 1e6 for i in self._interfaces}
        time.sleep(SETTLE_S)  # let the switches drain before their frames are accounted
        ports_after = read_ports(self._interfaces)
        counters = {sw: programming.read_event_counters(control) for sw, control in self._net.controls.items()}
        frames = {sw: account_switch(self._port_counters, ports_after, self._ports[sw], counters[sw]) for sw in counters}
        return JobMeasurement(cpu, tx_mbps, counters, frames)
