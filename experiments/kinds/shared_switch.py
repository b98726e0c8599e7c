"""Several jobs of one in-network method sharing one switch (a config with ``jobs:``): run,
verify, record.

Per point: one network whose aggregating switch is programmed with every job by the
method's protocol (a static partition, each job its own range of the switch's memory, or one
shared pool every job hashes into; servers beside the workers where the protocol asks, one
set per job), one worker group per job on its own hosts, started together; each repetition releases every job at
its ``start_s`` after the first, collects and verifies each job's results on their own,
and appends one row per worker to jobs.csv. The summary gives each job's median TAT and
ATE/s and the point's total: all jobs' elements over the time from the first release to
the last job's end (the makespan).

Why its own writer: the jobs of one point overlap, so the per-job tables of a one-job run
(runs.csv with switch counters, CPU and frame accounting per job) do not apply; jobs.csv
has the columns docs/results-format.md describes under "Shared-switch runs", with the
machine's busy share over each repetition (all its jobs) as the one fidelity measure.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from experiments import metrics
from experiments.metrics import shared_switch_jobs, shared_switch_totals
from base.yamlschema import ConfigError
from experiments.config import Experiment, Point, point_label
from workloads.kinds import point_inputs, workload_of
from experiments.job_meter import JobMeasurement, machine_cpu
from experiments.results import MACHINE_SATURATED, ResultsWriter, data_path_record
from experiments.harness import ExperimentKind, PointNetwork, point_network, verify_reports, worker_spec
from experiments.kinds.sweep import ExperimentRunner
from methods.aggregation import PoolSharing
from methods.verification import expected_for
from experiments.workers import REPORT_GRACE_S
import methods
from switches.fabric import SharedJob
from protocol import results_format as fmt
from protocol.params import mbps_to_bps
from topologies.model import Topology

log = logging.getLogger(__name__)

def job_method(point: Point) -> str:
    """The in-network method the point's jobs run (``check_jobs`` admits one)."""
    [method] = point.methods
    return method


SHARE = "share"
"""A job's ``pool_size`` that says: the job's share of the switch's register budget."""


def sharing(data: Mapping[str, Any]) -> PoolSharing:
    """How the jobs' protocol spends the switch's memory (its record's ``pool_sharing``)."""
    [method] = data["methods"]
    return methods.by_name(method).aggregation.pool_sharing


def job_pool(data: Mapping[str, Any], job: Mapping[str, Any]) -> int:
    """The job's pool: its ``pool_size``, or for ``share`` its part of the same register
    budget, ``switch.max_pool_size`` aggregators of k values, as its design spends it
    (``PoolSharing.share``): a static partition gives each of the point's jobs an equal range
    (SwitchML: budget // (2 * jobs) slots of two copies each), a shared pool all of it to
    every job (ATP: each hashes its window's positions into it)."""
    pool = job["pool_size"]
    if pool != SHARE:
        return int(pool)
    return sharing(data).share(int(data["switch"]["max_pool_size"]), len(data["jobs"]))


def job_elements(point: Point, job: dict[str, Any]) -> int:
    return int(job.get("elements", point.workload["elements"]))


def job_inputs(point: Point, job: dict[str, Any]) -> list[np.ndarray]:
    """The tensors of ``job``'s ranks: the point's workload with the job's elements, seeded by its id."""
    return point_inputs({**point.workload, "elements": job_elements(point, job), "seed": point.workload["seed"] + job["job_id"]},
                        len(job["hosts"]))


def point_jobs(point: Point) -> list[SharedJob]:
    hosts = point.topology.hosts
    return [SharedJob(job["job_id"], tuple(hosts[i].name for i in job["hosts"]), job_pool(point.data, job)) for job in point.data["jobs"]]


class SharedSwitchWriter(ResultsWriter):
    """A one-job run's config.yaml, topology.yaml, network.json and logs/; then jobs.csv and
    its own summary.json instead of runs.csv and the per-job tables."""

    def add_job(self, point: Point, repetition: int, job: dict[str, Any], released_s: float, reports: list[dict[str, Any]], verdicts: list,
                machine_busy: float | None) -> None:
        """``machine_busy`` None: not measured (a simulated run's jobs ran on no CPU)."""
        self._append(fmt.JOBS, [
            {
                "point": point.index, "n_jobs": len(point.data["jobs"]), "repetition": repetition, "job_id": job["job_id"], "rank": rank,
                "n_workers": len(reports), "elements": job_elements(point, job), "pool_size": job_pool(point.data, job),
                "start_s": job.get("start_s", 0.0), "released_s": round(released_s, 6), "tat_s": report["stats"]["tat_s"],
                "ate_per_s": metrics.ate_per_s(job_elements(point, job), report["stats"]["tat_s"]),
                "retransmissions": report["stats"]["retransmissions"], "verified": verdict.verified,
                "max_abs_error": verdict.max_abs_error, "link_mbps": point.topology.link_mbps, "k": point.job.k,
                "machine_busy_fraction": "" if machine_busy is None else round(machine_busy, 4),
            }
            for rank, (report, verdict) in enumerate(zip(reports, verdicts))
        ])

    def add_counters(self, point: Point, repetition: int, jobs: Sequence[dict[str, Any]], reports: Sequence[list[dict[str, Any]]],
                     measured: JobMeasurement) -> None:
        """One repetition's protocol counters (each worker's, indexed by its topology host, and
        each job's servers') and the switches' event counters, as a one-job run records them."""
        method = job_method(point)
        own = [{"point": point.index, "method": method, "repetition": repetition, "role": "worker", "index": host, "counter": name,
                "value": value}
               for job, job_reports in zip(jobs, reports) for host, report in zip(job["hosts"], job_reports)
               for name, value in report["stats"].get("protocol", {}).items()]
        own += [{"point": point.index, "method": method, "repetition": repetition, "role": "server", "index": index, "counter": name,
                 "value": value} for index, counts in enumerate(measured.servers) for name, value in counts.items()]
        if own:
            self._append(fmt.PROTOCOL_COUNTERS, own)
        self._append(fmt.SWITCH_COUNTERS, [
            {"point": point.index, "method": method, "repetition": repetition, "switch": sw, "counter": name, "value": value}
            for sw, values in measured.counters.items() for name, value in values.items()
        ])

    def finalize(self, verified: bool) -> dict[str, Any]:
        rows = pd.read_csv(self.run_dir / fmt.JOBS.file)
        points = []
        for point_index, per_point in rows.groupby("point"):
            jobs = shared_switch_jobs(per_point)
            totals = shared_switch_totals(jobs)
            rate = per_point["link_mbps"].iloc[0]
            points.append({
                "point": int(point_index),
                "n_jobs": int(per_point["n_jobs"].iloc[0]),
                "jobs": {
                    str(job_id): {
                        "workers": int(group["n_workers"].iloc[0]), "elements": int(group["elements"].iloc[0]),
                        "pool_size": int(group["pool_size"].iloc[0]), "start_s": float(group["start_s"].iloc[0]),
                        "tat_s": float(group["tat_s"].median()), "ate_per_s": float(group["ate_per_s"].median()),
                        "verified": bool(group["verified"].all()),
                    }
                    for job_id, group in jobs.groupby("job_id")
                },
                "total_ate_per_s": float(totals["total_ate_per_s"].median()),
                "makespan_s": float(totals["makespan_s"].median()),
                "line_rate_bound_ate_per_s_per_job": None if pd.isna(rate) else methods.by_name(job_method(self.experiment.points[int(point_index)])).bound(
                    mbps_to_bps(rate), len(self.experiment.points[int(point_index)].topology.hosts), int(per_point["k"].iloc[0])),
            })
        first = self.experiment.points[0]
        summary = {
            "config": self.experiment.name,
            "kind": fmt.SHARED_SWITCH_KIND,
            "started_utc": self.started.isoformat(),
            "duration_s": round((datetime.now(timezone.utc) - self.started).total_seconds(), 2),
            "verified": bool(verified and rows["verified"].all()),
            "switch_target": self.target,
            fmt.DATA_PATH_KEY: data_path_record(first),
            "max_pool_size": self.experiment.data["switch"]["max_pool_size"],
            "link_mbps": first.topology.link_mbps,
            fmt.SIMULATED_KEY: self.simulation is not None,
            "max_machine_busy_fraction": None if self.simulation is not None else float(rows["machine_busy_fraction"].max()),
            "kept_up": self.simulation is not None or bool(rows["machine_busy_fraction"].max() < MACHINE_SATURATED),
            "network": self._network,
            "points": points,
        }
        if self.simulation is not None:
            summary[fmt.SIMULATION_KEY] = self.simulation
        self.write_summary(summary)
        return summary


def format_shared_table(summary: dict[str, Any]) -> str:
    """Per point and job: TAT and ATE/s, and the point's total, as a CLI table."""
    lines = [f"{'point':>5} {'jobs':>4} {'job':>5} {'workers':>7} {'elements':>9} {'pool':>5} {'TAT s':>8} {'ATE/s':>10}"]
    for point in summary["points"]:
        for job_id, job in point["jobs"].items():
            lines.append(
                f"{point['point']:>5} {point['n_jobs']:>4} {job_id:>5} {job['workers']:>7} {job['elements']:>9} {job['pool_size']:>5} "
                f"{job['tat_s']:>8.3f} {job['ate_per_s']:>10.0f}"
            )
        lines.append(f"{point['point']:>5} {point['n_jobs']:>4} {'all':>5} {'':>7} {'':>9} {'':>5} {point['makespan_s']:>8.3f} {point['total_ate_per_s']:>10.0f}")
    return "\n".join(lines)


class SharedSwitchRunner(ExperimentRunner):
    """Every point once, with all its jobs (there is no per-method resume: jobs overlap)."""

    def run(self) -> bool:
        verified = True
        for point in self.experiment.points:
            verified &= self._run_jobs_point(point)
        return verified

    def _run_jobs_point(self, point: Point) -> bool:
        with point_network(self.experiment, point, self.clock, self.writer, jobs=point_jobs(point)) as held:
            return self._run_jobs(held)

    def _job_spec(self, held: PointNetwork, job: dict[str, Any]) -> tuple[Path, Any]:
        """The job's worker spec (its own job id, pool, workers and inputs) and expected sum."""
        point = held.point
        n = len(job["hosts"])
        work = held.work / f"job{job['job_id']}"  # workers write their results beside their spec
        work.mkdir()
        inputs = job_inputs(point, job)
        method = job_method(point)
        spec = worker_spec(point, method, job["job_id"]).with_job(n, job["job_id"], job_pool(point.data, job))
        spec = replace(spec, inputs=held.write_inputs(inputs, work))
        own = methods.own_sums(point.methods, {**point.protocol, "job_id": job["job_id"], "pool_size": job_pool(point.data, job)})
        return spec.write(work / f"job{job['job_id']}.json"), expected_for(inputs, point.job.k, own)

    def _run_jobs(self, held: PointNetwork) -> bool:
        point = held.point
        jobs: Sequence[dict[str, Any]] = sorted(point.data["jobs"], key=lambda job: job.get("start_s", 0.0))
        method = job_method(point)
        held.prepare(method)
        ok = True
        with contextlib.ExitStack() as stack:
            groups = []
            for job in jobs:
                spec_path, expected = self._job_spec(held, job)
                groups.append((job, stack.enter_context(held.workers(method, spec_path, job["hosts"])), expected))
            for repetition in range(point.repetitions):
                busy_before, total_before = machine_cpu()
                meter = held.meter(groups[0][1])  # the switch's and every server's counts: all the jobs'
                meter.start()
                released = held.release_together([group for _, group, _ in groups], repetition,
                                                 [job.get("start_s", 0.0) for job, _, _ in groups])
                collected = [group.collect("done", held.job_limit(method), grace_s=REPORT_GRACE_S) for _, group, _ in groups]
                busy_after, total_after = machine_cpu()
                self.writer.add_counters(point, repetition, [job for job, _, _ in groups], collected, meter.stop())
                # the machine's busy share measures an emulation keeping up; a simulated job ran on no CPU
                machine_busy = None if self.clock.simulated else (busy_after - busy_before).busy / max(1e-9, total_after - total_before)
                for (job, _group, expected), released_s, reports in zip(groups, released, collected):
                    verdicts = verify_reports(method, expected, reports, f"point {point.index} rep {repetition} job {job['job_id']}")
                    ok &= all(v.verified for v in verdicts)
                    self.writer.add_job(point, repetition, job, released_s, reports, verdicts, machine_busy)
                self.progress(f"{len(jobs)} jobs rep {repetition}")
            for _, group, _ in groups:
                group.finish()
        return ok


def check_jobs(data: Mapping[str, Any], topology: Topology, source: str) -> None:
    """Jobs sharing the switch: one in-network method on a synthetic workload, disjoint hosts
    that exist (at most a bitmap's workers in all: the topology's fan-in check), on one
    aggregating switch; a partitioning
    protocol's pools as its control plane admits them together (the check it makes on the
    switch: each job its own range). Jobs hashing into one shared pool need no partition."""
    if topology.aggregation == "hierarchical":
        raise ConfigError(f"{source}: jobs: jobs sharing a switch run on one aggregating switch, not with topology.aggregation: hierarchical")
    in_network = [m.name for m in methods.REGISTRY if m.aggregation is not None]
    if len(data["methods"]) != 1 or data["methods"][0] not in in_network or "elements" not in workload_of(data["workload"]).properties:
        raise ConfigError(f"{source}: jobs: jobs sharing a switch run one in-network method ({' or '.join(in_network)}) on a workload "
                          f"whose jobs give their own elements (synthetic)")
    aggregation = methods.by_name(data["methods"][0]).aggregation
    ids = [job["job_id"] for job in data["jobs"]]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{source}: jobs: job ids must differ between jobs sharing a switch, got {ids}")
    seen: dict[int, int] = {}
    for job in data["jobs"]:
        for host in job["hosts"]:
            if host >= len(topology.hosts):
                raise ConfigError(f"{source}: jobs: job {job['job_id']} names host {host}; the topology has hosts 0..{len(topology.hosts) - 1}")
            if host in seen:
                raise ConfigError(f"{source}: jobs: host {host} is in job {seen[host]} and job {job['job_id']}")
            seen[host] = job["job_id"]
    try:
        aggregation.pool_sharing.admit([(job["job_id"], job_pool(data, job)) for job in data["jobs"]], data["switch"]["max_pool_size"])
    except ValueError as exc:
        raise ConfigError(f"{source}: jobs: {exc}") from None


def check(experiment: Experiment) -> None:
    """The shared-switch rules (``check_jobs``), for every point (the kind's ``check``)."""
    for point in experiment.points:
        check_jobs(point.data, point.topology, point_label(experiment.source, point))


KIND = ExperimentKind(
    name="shared_switch",
    applies=lambda experiment: experiment.data.get("jobs") is not None,
    check=check,
    writer=SharedSwitchWriter,
    runner=SharedSwitchRunner,
    unit="repetition",
    units=lambda experiment: sum(p.repetitions for p in experiment.points),
    report=format_shared_table,
)
"""Several jobs on one switch at once, each with its own part of its memory or all sharing one pool (the config lists ``jobs``)."""
