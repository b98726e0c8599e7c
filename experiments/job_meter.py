"""What the runner measures around one job, whatever the job is (a repetition, a training).

CPU time of every worker and switch process and the machine's busy share (kept_up), split
into user, system and softirq time (the eBPF switch's work is softirq time), the
switches' transmit rates, their event counters, and the accounting of every frame they
handled (network/port_counters.py). ``ExperimentRunner`` and ``TrainingRunner`` both time
their jobs with one ``JobMeter``, so the fidelity columns mean the same in every run.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping, Sequence, TypeVar

from protocol.results_format import MACHINE
from network.cluster_config import LOCAL
from network.port_counters import SETTLE_S, PortCounters, account_switch, parse_ports, read_ports, read_ports_script
from base.plugin import resolve
from switches.control import SwitchControl

if TYPE_CHECKING:  # Mininet's, which --simulate runs without
    from network.emulation import EmulatedNetwork

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class CpuSplit:
    """CPU time split by where it was spent: seconds, or shares once divided by a span.

    ``softirq`` is only known for the whole machine: /proc/<pid>/stat has no softirq
    column (a softirq that interrupted a process -- the eBPF switch, a veth's delivery --
    is in that process's system time with tick-based accounting, in no process's with
    CONFIG_IRQ_TIME_ACCOUNTING), so a process's is None.
    """

    user: float
    system: float
    softirq: float | None
    busy: float
    """user + system + softirq, plus interrupts and steal (time the hypervisor took: a VM's
    core that was not ours is not idle either)."""
    steal: float | None = None
    """The part of ``busy`` the hypervisor took for other guests (the machine's only): on a
    shared VM it stalls workers and the switch for milliseconds without any process of the
    testbed being busy."""

    def __sub__(self, earlier: "CpuSplit") -> "CpuSplit":
        softirq = None if self.softirq is None or earlier.softirq is None else self.softirq - earlier.softirq
        steal = None if self.steal is None or earlier.steal is None else self.steal - earlier.steal
        return CpuSplit(self.user - earlier.user, self.system - earlier.system, softirq, self.busy - earlier.busy, steal)

    def share_of(self, span: float) -> "CpuSplit":
        """Each part divided by ``span`` (seconds of one core, or of all cores)."""
        softirq = None if self.softirq is None else self.softirq / span
        steal = None if self.steal is None else self.steal / span
        return CpuSplit(self.user / span, self.system / span, softirq, self.busy / span, steal)


def process_cpu(pid: int) -> CpuSplit:
    """User and system CPU time of a process of this machine so far, zero if it is gone."""
    try:
        return stat_cpu(Path(f"/proc/{pid}/stat").read_text())
    except FileNotFoundError:
        return stat_cpu("")


def stat_cpu(stat: str) -> CpuSplit:
    """User and system CPU time in a /proc/PID/stat line (empty: the process is gone, zero)."""
    if not stat.strip():
        return CpuSplit(0.0, 0.0, None, 0.0)
    fields = stat.rsplit(")", 1)[1].split()
    user, system = int(fields[11]) / CLOCK_TICKS, int(fields[12]) / CLOCK_TICKS
    return CpuSplit(user, system, None, user + system)


def remote_cpu(run: Callable[[str], str], pids: Sequence[int]) -> tuple[str, dict[int, CpuSplit]]:
    """Another server's /proc/stat line (for ``machine_cpu``) and ``process_cpu`` of its
    processes ``pids``, in one command run there by ``run`` (an ssh round trip each is 0.1-0.3 s)."""
    machine, *lines = run(" ; ".join(["head -1 /proc/stat", *(f'echo "{pid} $(cat /proc/{pid}/stat 2>/dev/null)"' for pid in pids)])).splitlines()
    return machine, {int(pid): stat_cpu(stat) for pid, _, stat in (line.partition(" ") for line in lines if line.strip())}


def machine_cpu(stat: str | None = None) -> tuple[CpuSplit, float]:
    """CPU time of all cores so far, and all cores' time (busy or not), in seconds; of this
    machine, or of the server whose /proc/stat is ``stat``.

    /proc/stat's first line: user nice system idle iowait irq softirq steal guest guest_nice.
    Guest time is already inside user and nice, so it is not added again; idle and iowait
    are the only time not busy. Kernel switch work (the eBPF switch, veth delivery, htb)
    runs as softirq, so it is in ``busy`` and shown on its own.
    """
    text = Path("/proc/stat").read_text() if stat is None else stat
    user, nice, system, idle, iowait, irq, softirq, steal = (int(v) / CLOCK_TICKS for v in text.split("\n", 1)[0].split()[1:9])
    busy = user + nice + system + irq + softirq + steal
    return CpuSplit(user + nice, system + irq, softirq, busy, steal), busy + idle + iowait


def interface_bytes(name: str) -> int:
    """Bytes the switch has transmitted on one of its (root-namespace) interfaces."""
    return int(Path(f"/sys/class/net/{name}/statistics/tx_bytes").read_text())


@dataclass(frozen=True)
class JobMeasurement:
    cpu: dict[str, CpuSplit]
    """Shares of one core per process name, and the machine's shares of all cores (MACHINE)."""
    wall_s: float
    """Wall-clock time the shares are over: from the job's release until every worker reported."""
    tx_mbps: dict[str, float]
    """Transmit rate of every switch port over the job."""
    counters: dict[str, dict[str, int]]
    """Every switch's event counters for the job, by counter name."""
    frames: dict[str, dict[str, int]]
    """Every switch's frame accounting for the job (port_counters.account_switch)."""
    servers: list[dict[str, int]] = field(default_factory=list)
    """Each of the job's server hosts' counts over the job, in the spec's ``servers`` order
    (its protocol's ``ServerCore.stats`` simulated, ``Server.counts`` emulated: the same names); empty where
    its protocol has none."""


def counts_since(before: Sequence[Mapping[str, int]], after: Sequence[Mapping[str, int]]) -> list[dict[str, int]]:
    """Each server's counts over a job (``JobMeasurement.servers``): what it counted by its end
    less what it had at its start, since a server serves a point's every repetition."""
    return [{name: value - was.get(name, 0) for name, value in now.items()} for now, was in zip(after, before, strict=True)]


SETTLED_READS = 5
"""At most this many reads of the ports and counters, until two in a row agree (``settled``)."""

T = TypeVar("T")


def settled(read: Callable[[], T], reads: int = SETTLED_READS) -> T:
    """``read()`` again until two reads in a row are equal (at most ``reads`` reads; the last
    is returned), so the ports and the switches' counters are one snapshot. A switch's
    counters are read one register after the other (bmv2: a Thrift call each), and a frame
    that was inside the switch meanwhile (a TCP connection's last segments, after its job's
    data) was counted at ingress but not yet at egress: one "lost" frame in 16,863 in CI."""
    last = read()
    for _ in range(reads - 1):
        again = read()
        if again == last:
            break
        last = again
    return last


def reset_while_still(read: Callable[[], T], reset: Callable[[], None], reads: int = SETTLED_READS) -> T:
    """``reset()`` between two ``read()``s until the two agree, so that nothing passed while it
    ran (at most ``reads`` tries; the last read is returned): the reset counters and the read
    baseline then start from the same frame."""
    before = read()
    for _ in range(reads):
        reset()
        after = read()
        if after == before:
            break
        before = after
    return after


class JobMeter:
    """``start()`` before the job, ``stop()`` after it; the switches' counters are reset at start.

    ``processes``: name -> (the server it runs on, its pid there), whose CPU is read there.
    """

    def __init__(self, net: EmulatedNetwork, processes: Mapping[str, tuple[str, int]]) -> None:
        self._net = net
        self._processes = dict(processes)
        self._ports = {sw.name: [i.name for i in sw.intfList() if i.name != "lo"] for sw in net.net.switches}
        self._interfaces = [i for intfs in self._ports.values() for i in intfs]

    def _read(self) -> tuple[dict[str, PortCounters], dict[str, int]]:
        """Every switch port's counters and transmitted bytes, each read on its switch's server."""
        counters, tx_bytes = {}, {}
        for switch, interfaces in self._ports.items():
            run = self._net.switch_server_shell(switch)
            if run is None:
                counters |= read_ports(interfaces)
                tx_bytes |= {i: interface_bytes(i) for i in interfaces}
            else:
                theirs, sent = parse_ports(run(read_ports_script(interfaces)))
                counters, tx_bytes = counters | theirs, tx_bytes | sent
        return counters, tx_bytes

    def _cpu(self) -> tuple[dict[str, CpuSplit], dict[str, tuple[CpuSplit, float]]]:
        """Every measured process's CPU so far, and ``machine_cpu`` of this machine (MACHINE)
        and of every other server (``machine@<server>``): one command per other server."""
        processes = {name: process_cpu(pid) for name, (server, pid) in self._processes.items() if server == LOCAL}
        machines = {MACHINE: machine_cpu()}
        for server, run in self._net.server_shells().items():
            theirs = {name: pid for name, (where, pid) in self._processes.items() if where == server}
            stat, read = remote_cpu(run, list(theirs.values()))
            machines[f"{MACHINE}@{server}"] = machine_cpu(stat)
            processes |= {name: read.get(pid, stat_cpu("")) for name, pid in theirs.items()}
        return processes, machines

    def _event_counters(self) -> Callable[[SwitchControl], dict[str, int]]:
        """How the loaded protocol's switches count their events (its record's ``event_counters``;
        a program that counts nothing the results record: none)."""
        reference = self._net.loaded.event_counters
        return (lambda control: {}) if reference is None else resolve(reference)

    def start(self) -> None:
        """The CPU first (another server's is an ssh round trip), then the switches' counters
        reset between two reads of their ports (``reset_while_still``): a frame that passes
        between the reset and the ports' read is counted by one and not the other (a negative
        loss: 4 of Gloo's frames in a 16-worker job, whose connections carry frames between jobs)."""
        self._process_start, self._machine_start = self._cpu()

        def reset() -> None:  # every counter of the loaded program: its event counters among them
            for control in self._net.controls.values():
                for counter in control.schema.counters:
                    control.counter_reset(counter)

        self._port_counters, self._tx = reset_while_still(self._read, reset)
        self._servers = self._net.server_counts()
        self._t0 = time.monotonic()

    def stop(self) -> JobMeasurement:
        wall = time.monotonic() - self._t0
        processes, machines = self._cpu()
        cpu = {name: (now - self._process_start[name]).share_of(wall) for name, now in processes.items()}
        for name, (machine, total) in machines.items():
            start, start_total = self._machine_start[name]
            cpu[name] = (machine - start).share_of(max(1 / CLOCK_TICKS, total - start_total))
        tx_now = self._read()[1]
        tx_mbps = {i: (tx_now[i] - self._tx[i]) * 8 / wall / 1e6 for i in self._interfaces}
        time.sleep(SETTLE_S)  # let the switches drain before their frames are accounted
        read_counters = self._event_counters()
        ports_after, counters = settled(lambda: (self._read()[0], {sw: read_counters(control) for sw, control in self._net.controls.items()}))
        notes = self._net.loaded.event_notes
        frames = {sw: account_switch(self._port_counters, ports_after, self._ports[sw], counters[sw], notes) for sw in counters}
        return JobMeasurement(cpu, wall, tx_mbps, counters, frames, counts_since(self._servers, self._net.server_counts()))
