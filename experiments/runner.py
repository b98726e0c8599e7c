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
import shutil
from pathlib import Path
from typing import Any, Callable

import numpy as np

from experiments.config import Experiment, Point
from experiments.inputs import point_inputs
from experiments.job_meter import JobMeter
from experiments.results import ResultsWriter, link_mbps
from experiments.verify import Expected, expected_for, verify_baseline, verify_switchml
from experiments.workers import REPORT_GRACE_S, Limit, WorkerGroup
from network.emulation import EmulatedNetwork
from switches import programming

log = logging.getLogger(__name__)

BASELINE_PORT = 47000
"""TCP port the ring and parameter-server ranks listen on."""

def worker_spec(point: Point, method: str) -> dict[str, Any]:
    """What every worker process of a method needs (hosts/worker.py), whatever its job."""
    topology = point.topology
    return {
        "method": method,
        "n_workers": len(topology.hosts),
        "switch_ipv4": topology.aggregator_ipv4,
        "link_mbps": link_mbps(point),
        "protocol": dict(point.protocol),
        "peers": [[h.ipv4, BASELINE_PORT] for h in topology.hosts],
        "job_timeout_s": point.limits["job_timeout_s"],
        "connect_timeout_s": point.limits["worker_start_s"],
    }


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
            pool_size=protocol["pool_size"],
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
            spec = worker_spec(point, method) | {"inputs": input_paths}
            spec_path = inputs_dir / f"{method}.json"
            spec_path.write_text(json.dumps(spec, indent=1))
            ok &= self._run_method(net, point, method, spec_path, expected)
        return ok

    def _run_method(self, net: EmulatedNetwork, point: Point, method: str, spec_path: Path, expected: Expected) -> bool:
        topology = point.topology
        hosts = [net.host(h.name) for h in topology.hosts]
        for aggregating in net.aggregating_controls:
            programming.reset_aggregation_state(aggregating, point.protocol["k"])
        ok = True
        switches = net.switch_processes()
        job_limit = Limit("limits.job_timeout_s", point.limits["job_timeout_s"])
        log_dir = self.writer.log_dir / f"point{point.index}"
        with WorkerGroup(method, hosts, spec_path, log_dir, dependencies=switches) as group, group.dependencies_checked():
            group.start(Limit("limits.worker_start_s", point.limits["worker_start_s"]))
            meter = JobMeter(net, {h.name: p.pid for h, p in zip(topology.hosts, group.procs)} | switches)
            for repetition in range(point.repetitions):
                meter.start()  # every switch's counters are per repetition
                group.release(repetition)
                reports = group.collect("done", job_limit, grace_s=REPORT_GRACE_S)
                measured = meter.stop()
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
                self.writer.add_repetition(point, method, repetition, reports, verdicts, measured, net.report.loss_mechanism)
                self.progress(f"{method} rep {repetition}")
            group.finish()
        return ok

