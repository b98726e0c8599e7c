"""Several SwitchML jobs sharing one switch (a config with ``jobs:``): run, verify, record.

Per point: one network whose aggregating switch is programmed with every job (each its
own slot range and multicast group: switches/programming.py, ``admit_jobs``), one worker
group per job on its own hosts, started together; each repetition releases every job at
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
import csv
import json
import logging
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from analysis.models import switchml_line_rate_ate
from experiments import metrics
from experiments.config import Point
from experiments.inputs import point_inputs
from experiments.job_meter import machine_cpu
from experiments.results import MACHINE_SATURATED, ResultsWriter, link_mbps
from experiments.runner import ExperimentRunner, worker_spec
from experiments.verify import expected_for, verify_switchml
from experiments.workers import REPORT_GRACE_S, Limit, WorkerGroup
from network.emulation import EmulatedNetwork, SharedJob
from switches import programming

log = logging.getLogger(__name__)

METHOD = "switchml"
JOBS_COLUMNS = [
    "point", "n_jobs", "repetition", "job_id", "rank", "n_workers", "elements", "pool_size",
    "start_s", "released_s", "tat_s", "ate_per_s", "retransmissions", "verified", "max_abs_error", "link_mbps", "k",
    "machine_busy_fraction",
]  # fmt: skip


def job_elements(point: Point, job: dict[str, Any]) -> int:
    return int(job.get("elements", point.workload["elements"]))


def point_jobs(point: Point) -> list[SharedJob]:
    hosts = point.topology.hosts
    return [SharedJob(job["job_id"], tuple(hosts[i].name for i in job["hosts"]), job["pool_size"]) for job in point.data["jobs"]]


class SharedSwitchWriter(ResultsWriter):
    """A one-job run's config.yaml, topology.yaml, network.json and logs/; then jobs.csv and
    its own summary.json instead of runs.csv and the per-job tables."""

    def add_job(self, point: Point, repetition: int, job: dict[str, Any], released_s: float, reports: list[dict[str, Any]], verdicts: list,
                machine_busy: float) -> None:
        path = self.run_dir / "jobs.csv"
        new = not path.exists()
        with path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=JOBS_COLUMNS)
            if new:
                writer.writeheader()
            for rank, (report, verdict) in enumerate(zip(reports, verdicts)):
                stats = report["stats"]
                writer.writerow({
                    "point": point.index, "n_jobs": len(point.data["jobs"]), "repetition": repetition, "job_id": job["job_id"], "rank": rank,
                    "n_workers": len(reports), "elements": job_elements(point, job), "pool_size": job["pool_size"],
                    "start_s": job.get("start_s", 0.0), "released_s": round(released_s, 6), "tat_s": stats["tat_s"],
                    "ate_per_s": metrics.ate_per_s(job_elements(point, job), stats["tat_s"]), "retransmissions": stats["retransmissions"],
                    "verified": verdict.verified, "max_abs_error": verdict.max_abs_error, "link_mbps": link_mbps(point),
                    "k": point.protocol["k"], "machine_busy_fraction": round(machine_busy, 4),
                })

    def finalize(self, verified: bool) -> dict[str, Any]:
        rows = pd.read_csv(self.run_dir / "jobs.csv")
        points = []
        for point_index, per_point in rows.groupby("point"):
            jobs = job_table(per_point)
            totals = total_table(jobs)
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
                "line_rate_bound_ate_per_s_per_job": None if pd.isna(rate) else switchml_line_rate_ate(rate * 1e6, int(per_point["k"].iloc[0])),
            })
        first = self.experiment.points[0]
        summary = {
            "config": self.experiment.name,
            "kind": "shared_switch",
            "started_utc": self.started.isoformat(),
            "duration_s": round((datetime.now(timezone.utc) - self.started).total_seconds(), 2),
            "verified": bool(verified and rows["verified"].all()),
            "switch_target": self.target,
            "max_pool_size": self.experiment.data["switch"]["max_pool_size"],
            "link_mbps": link_mbps(first),
            "max_machine_busy_fraction": float(rows["machine_busy_fraction"].max()),
            "kept_up": bool(rows["machine_busy_fraction"].max() < MACHINE_SATURATED),
            "network": self._network,
            "points": points,
        }
        (self.run_dir / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
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


def job_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (point, repetition, job): the job ends when its slowest worker does."""
    jobs = rows.groupby(["point", "n_jobs", "repetition", "job_id"], as_index=False).agg(
        tat_s=("tat_s", "max"), released_s=("released_s", "first"), elements=("elements", "first"),
        n_workers=("n_workers", "first"), pool_size=("pool_size", "first"), start_s=("start_s", "first"),
        verified=("verified", "all"),
    )
    jobs["ate_per_s"] = jobs["elements"] / jobs["tat_s"]
    return jobs


def total_table(jobs: pd.DataFrame) -> pd.DataFrame:
    """Per (point, repetition): every job's elements over the makespan (first release to last end)."""
    ends = jobs.assign(end_s=jobs["released_s"] + jobs["tat_s"])
    totals = ends.groupby(["point", "n_jobs", "repetition"], as_index=False).agg(
        elements=("elements", "sum"), first_s=("released_s", "min"), end_s=("end_s", "max"),
    )
    totals["makespan_s"] = totals["end_s"] - totals["first_s"]
    totals["total_ate_per_s"] = totals["elements"] / totals["makespan_s"]
    return totals


class SharedSwitchRunner(ExperimentRunner):
    """Every point once, with all its jobs (there is no per-method resume: jobs overlap)."""

    def run(self) -> bool:
        verified = True
        for point in self.experiment.points:
            verified &= self._run_jobs_point(point)
        return verified

    def _run_jobs_point(self, point: Point) -> bool:
        protocol = point.protocol
        with EmulatedNetwork(
            point.topology, self.target, self.writer.log_dir / f"point{point.index}", k=protocol["k"],
            max_pool_size=self.experiment.data["switch"]["max_pool_size"], job_id=protocol["job_id"],
            pool_size=protocol["pool_size"], loss_mechanism=point.data["loss_mechanism"], jobs=point_jobs(point),
        ) as net:
            net.declare_directory(self.writer.work_dir)
            work = self.writer.work_dir / f"point{point.index}"
            work.mkdir(parents=True, exist_ok=True)
            try:
                self.writer.record_network(point.index, net.describe())
                return self._run_jobs(net, point, work)
            finally:
                shutil.rmtree(self.writer.work_dir, ignore_errors=True)

    def _job_spec(self, point: Point, job: dict[str, Any], work: Path) -> tuple[Path, Any]:
        """The job's worker spec (its own job id, pool, workers and inputs) and expected sum."""
        n = len(job["hosts"])
        work = work / f"job{job['job_id']}"  # workers write their results beside their spec
        work.mkdir()
        inputs = point_inputs({**point.workload, "elements": job_elements(point, job), "seed": point.workload["seed"] + job["job_id"]}, n)
        paths = []
        for rank, tensor in enumerate(inputs):
            path = work / f"input-rank{rank}.npy"
            np.save(path, tensor)
            paths.append(str(path))
        spec = worker_spec(point, METHOD) | {
            "n_workers": n, "inputs": paths, "protocol": {**point.protocol, "job_id": job["job_id"], "pool_size": job["pool_size"]},
        }
        spec_path = work / f"job{job['job_id']}.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        return spec_path, expected_for(inputs, point.protocol["k"])

    def _run_jobs(self, net: EmulatedNetwork, point: Point, work: Path) -> bool:
        jobs: Sequence[dict[str, Any]] = sorted(point.data["jobs"], key=lambda job: job.get("start_s", 0.0))
        topology_hosts = point.topology.hosts
        programming.reset_aggregation_state(net.aggregator_control, point.protocol["k"])
        switches = net.switch_processes()
        job_limit = Limit("limits.job_timeout_s", point.limits["job_timeout_s"])
        log_dir = self.writer.log_dir / f"point{point.index}"
        ok = True
        with contextlib.ExitStack() as stack:
            groups = []
            for job in jobs:
                spec_path, expected = self._job_spec(point, job, work)
                hosts = [net.host(topology_hosts[i].name) for i in job["hosts"]]
                group = stack.enter_context(WorkerGroup(METHOD, hosts, spec_path, log_dir, dependencies=switches))
                groups.append((job, group, expected))
            stack.enter_context(groups[0][1].dependencies_checked())
            for _, group, _ in groups:
                group.start(Limit("limits.worker_start_s", point.limits["worker_start_s"]))
            for repetition in range(point.repetitions):
                busy_before, total_before = machine_cpu()
                released = self._release(groups, repetition)
                collected = [group.collect("done", job_limit, grace_s=REPORT_GRACE_S) for _, group, _ in groups]
                busy_after, total_after = machine_cpu()
                machine_busy = (busy_after - busy_before).busy / max(1e-9, total_after - total_before)
                for (job, _group, expected), released_s, reports in zip(groups, released, collected):
                    verdicts = []
                    for rank, report in enumerate(reports):
                        verdict = verify_switchml(expected, np.load(report["result"]), np.load(report["int_sum"]))
                        if not verdict.verified:
                            log.error("point %d rep %d job %d rank %d: NOT VERIFIED: %s", point.index, repetition, job["job_id"], rank, verdict.detail)
                        ok &= verdict.verified
                        verdicts.append(verdict)
                        for key in ("result", "int_sum"):
                            Path(report[key]).unlink()
                    self.writer.add_job(point, repetition, job, released_s, reports, verdicts, machine_busy)
                self.progress(f"{len(jobs)} jobs rep {repetition}")
            for _, group, _ in groups:
                group.finish()
        return ok

    @staticmethod
    def _release(groups: list, repetition: int) -> list[float]:
        """Release each job at its start_s after the first; the times it was released at."""
        t0 = time.monotonic()
        released = []
        for job, group, _ in groups:
            delay = t0 + job.get("start_s", 0.0) - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            released.append(time.monotonic() - t0)
            group.release(repetition)
        return released
