"""Running an experiment: every sweep point, method and repetition on a fresh network.

For each point: build the emulated network (network.emulation), write each rank's input
tensor, then for each method start one worker per host (experiments.workers), release the
repetitions one by one, read the switch counters and each process's CPU time around each
repetition, verify every worker's result (experiments.verify), and append tidy rows to the
results (experiments.results). Everything started is stopped on the way out, whether the
run succeeds, fails, or is interrupted.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np

from experiments.config import Experiment, Point
from experiments.inputs import point_inputs
from experiments.results import MACHINE, ResultsWriter, link_mbps
from experiments.verify import Expected, expected_for, verify_baseline, verify_switchml
from experiments.workers import REPORT_GRACE_S, Limit, WorkerGroup
from network.emulation import EmulatedNetwork
from network.port_counters import SETTLE_S, account_switch, read_ports
from switches import programming

log = logging.getLogger(__name__)

BASELINE_PORT = 47000
"""TCP port the ring and parameter-server ranks listen on."""
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


class ExperimentRunner:
    def __init__(self, experiment: Experiment, target: str, writer: ResultsWriter, progress: Callable[[str], None]) -> None:
        self.experiment = experiment
        self.target = target
        self.writer = writer
        self.progress = progress

    def run(self) -> bool:
        """Run every point not already in the results; True when every result verified."""
        verified = True
        for point in self.experiment.points:
            pending = []
            for method in point.methods:
                if self.writer.has_rows(point.index, method, point.repetitions):
                    log.info("point %d %s: already in %s, skipped (resume)", point.index, method, self.writer.run_dir)
                    for _ in range(point.repetitions):
                        self.progress("skipped")
                else:
                    self.writer.discard(point.index, method)
                    pending.append(method)
            if pending:
                verified &= self._run_point(point, pending)
        return verified

    def _run_point(self, point: Point, methods: list[str]) -> bool:
        """One network for the point. Its inputs and the workers' results live in a work
        folder that exists only while the network is held: removed afterwards whatever
        happens, and by the next run if this one is killed (tensors can be large)."""
        protocol = point.protocol
        with EmulatedNetwork(
            point.topology,
            self.target,
            self.writer.log_dir / f"point{point.index}",
            k=protocol["k"],
            max_pool_size=self.experiment.data["switch"]["max_pool_size"],
            job_id=protocol["job_id"],
            loss_mechanism=point.data["loss_mechanism"],
        ) as net:
            net.declare_directory(self.writer.work_dir)
            inputs_dir = self.writer.work_dir / f"point{point.index}"
            inputs_dir.mkdir(parents=True, exist_ok=True)
            try:
                return self._run_point_in(net, point, methods, inputs_dir)
            finally:
                shutil.rmtree(self.writer.work_dir, ignore_errors=True)

    def _run_point_in(self, net: EmulatedNetwork, point: Point, methods: list[str], inputs_dir: Path) -> bool:
        protocol = point.protocol
        topology = point.topology
        inputs = point_inputs(point.workload, len(topology.hosts))
        input_paths = []
        for rank, tensor in enumerate(inputs):
            path = inputs_dir / f"input-rank{rank}.npy"
            np.save(path, tensor)
            input_paths.append(str(path))
        expected = expected_for(inputs, protocol["k"])
        del inputs
        ok = True
        self.writer.record_network(point.index, net.describe())
        for method in methods:
            spec = {
                "method": method,
                "n_workers": len(topology.hosts),
                "inputs": input_paths,
                "switch_ipv4": topology.aggregator_ipv4,
                "link_mbps": link_mbps(point),
                "protocol": dict(protocol),
                "peers": [[h.ipv4, BASELINE_PORT] for h in topology.hosts],
                "job_timeout_s": point.limits["job_timeout_s"],
                "connect_timeout_s": point.limits["worker_start_s"],
            }
            spec_path = inputs_dir / f"{method}.json"
            spec_path.write_text(json.dumps(spec, indent=1))
            ok &= self._run_method(net, point, method, spec_path, expected)
        return ok

    def _run_method(self, net: EmulatedNetwork, point: Point, method: str, spec_path: Path, expected: Expected) -> bool:
        topology = point.topology
        control = net.aggregator_control
        hosts = [net.host(h.name) for h in topology.hosts]
        ports = {sw.name: [i.name for i in sw.intfList() if i.name != "lo"] for sw in net.net.switches}
        switch_intfs = [i for intfs in ports.values() for i in intfs]
        programming.reset_aggregation_state(control, point.protocol["k"])
        ok = True
        # Switch processes the workers depend on, and whose CPU share is measured. An eBPF
        # switch has none (switch_pid None): it lives as long as its ports, and its work is
        # softirq time, which the machine's busy share counts.
        switches = {sw.name: sw.switch_pid for sw in net.net.switches if sw.switch_pid is not None}
        job_limit = Limit("limits.job_timeout_s", point.limits["job_timeout_s"])
        log_dir = self.writer.log_dir / f"point{point.index}"
        with WorkerGroup(method, hosts, spec_path, log_dir, dependencies=switches) as group, group.dependencies_checked():
            group.start(Limit("limits.worker_start_s", point.limits["worker_start_s"]))
            processes = {h.name: p.pid for h, p in zip(topology.hosts, group.procs)}
            processes.update(switches)
            for repetition in range(point.repetitions):
                for switch_control in net.controls.values():  # every switch's counters are per repetition
                    programming.reset_event_counters(switch_control)
                cpu_before = {name: cpu_seconds(pid) for name, pid in processes.items()}
                machine_before = machine_jiffies()
                tx_before = {i: interface_bytes(i) for i in switch_intfs}
                ports_before = read_ports(switch_intfs)
                t0 = time.monotonic()
                group.release(repetition)
                reports = group.collect("done", job_limit, grace_s=REPORT_GRACE_S)
                wall = time.monotonic() - t0
                cpu = {name: (cpu_seconds(pid) - cpu_before[name]) / wall for name, pid in processes.items()}
                machine_after = machine_jiffies()
                cpu[MACHINE] = (machine_after[0] - machine_before[0]) / max(1, machine_after[1] - machine_before[1])
                tx_mbps = {i: (interface_bytes(i) - tx_before[i]) * 8 / wall / 1e6 for i in switch_intfs}
                time.sleep(SETTLE_S)  # let the switches drain before their frames are accounted
                ports_after = read_ports(switch_intfs)
                counters = {sw: programming.read_event_counters(c) for sw, c in net.controls.items()}
                frames = {sw: account_switch(ports_before, ports_after, ports[sw], counters[sw]) for sw in counters}
                verdicts = []
                for rank, report in enumerate(reports):
                    values = np.load(report["result"])
                    if method == "switchml":
                        verdict = verify_switchml(expected, values, np.load(report["int_sum"]))
                    else:
                        verdict = verify_baseline(expected, values)
                    if not verdict.verified:
                        log.error("point %d %s rep %d rank %d: NOT VERIFIED: %s", point.index, method, repetition, rank, verdict.detail)
                    ok &= verdict.verified
                    verdicts.append(verdict)
                    for key in ("result", "int_sum"):
                        if key in report:
                            Path(report[key]).unlink()
                self.writer.add_repetition(point, method, repetition, reports, verdicts, counters, frames, cpu, tx_mbps, net.report.loss_mechanism)
                self.progress(f"{method} rep {repetition}")
            group.finish()
        return ok

