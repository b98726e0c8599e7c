"""Writing a run's results as tidy tables (docs/results-format.md), row by row.

Rows are appended as each repetition finishes, so an interrupted sweep keeps what it
measured and ``--resume`` can skip finished (point, method) pairs. The summary is computed
from the tables at the end, never from numbers held aside.
"""

from __future__ import annotations

import csv
import json
import logging
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import pandas as pd
import yaml

from experiments import metrics, provenance
from experiments.metrics import timed_cpu_samples
from experiments.config import Experiment, Point, data_path_protocol
from experiments.pace import PACE_SHARE, pace_check, paced_by_emulator
from methods.verification import Verdict
from hosts.stats import TIMELINE_BIN_S
from methods import by_name
from methods.ring import busbw
from network.port_counters import frames_lost
from protocol import results_format as fmt
from protocol.packet import ELEMENT_BYTES
from protocol.params import mbps_to_bps

if TYPE_CHECKING:
    from experiments.job_meter import JobMeasurement

log = logging.getLogger(__name__)

CPU_SATURATED = 0.9
"""A process busier than this share of one core may have been the bottleneck, not the network."""
MACHINE_SATURATED = 0.95
"""A machine with less than 5 % idle CPU during a job starved some process: the emulator, not
the network, set the pace. (A self-clocked run uses whatever CPU is free, so busy shares of
processes alone do not say whether they were starved; idle time does.)"""


def utc_stamp(at: float | None = None) -> str:
    """A results folder's name: the UTC time (now, or ``at`` in seconds since the epoch) to the second."""
    moment = datetime.now(timezone.utc) if at is None else datetime.fromtimestamp(at, timezone.utc)
    return moment.strftime("%Y%m%dT%H%M%SZ")


def data_path_record(point: Point) -> dict[str, str]:
    """summary.json's ``data_path``: whose worker loop, what the config asked for, what ran, and
    why (``auto`` falls back to Python where the native loop does not build)."""
    return {"protocol": data_path_protocol(point.methods).name, "requested": point.protocol["data_path"],
            "used": point.data_path.name, "reason": point.data_path.reason}


class ResultsWriter:
    def __init__(self, run_dir: Path, experiment: Experiment, target: str) -> None:
        self.run_dir = run_dir
        self.experiment = experiment
        self.target = target
        self.log_dir = run_dir / "logs"
        self.work_dir = run_dir / "work"
        """Inputs and workers' results of the point running; the runner makes and removes it."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.started = datetime.now(timezone.utc)
        self.started_from = provenance.at_start()
        """The commit and command line as the run started (summary.json's ``provenance``)."""
        (run_dir / fmt.CONFIG_FILE).write_text(yaml.safe_dump(dict(experiment.data), sort_keys=False))
        (run_dir / "topology.yaml").write_text(yaml.safe_dump(dict(experiment.points[0].topology.resolved), sort_keys=False))
        self._network: dict[int, dict[str, Any]] = {}
        self.simulation: dict[str, Any] | None = None
        """The simulator's models (``mark_simulated``); None for an emulated run."""
        network_path = run_dir / fmt.NETWORK_FILE
        if network_path.exists():
            self._network = {int(k): v for k, v in json.loads(network_path.read_text()).items()}

    def mark_simulated(self, simulation: dict[str, Any]) -> None:
        """This run's jobs ran on the simulated clock (run_experiment.py --simulate): summary.json
        says so (``simulated``) and records ``simulation``, the simulator's models."""
        self.simulation = dict(simulation)

    # -- incremental tables --------------------------------------------------------------

    def _append(self, table: fmt.Table, rows: Sequence[dict[str, Any]]) -> None:
        path = self.run_dir / table.file
        columns = list(table.columns)
        new = not path.exists()
        if not new and table_columns(path) != columns:  # a run resumed by a version that writes more columns
            pd.read_csv(path, dtype=str, keep_default_na=False).reindex(columns=columns, fill_value="").to_csv(path, index=False)
        with path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=columns)
            if new:
                writer.writeheader()
            writer.writerows(rows)

    def has_rows(self, point: int, method: str, repetitions: int) -> bool:
        """True when every repetition of (point, method) is in runs.csv (``--resume`` skips it)."""
        path = self.run_dir / fmt.RUNS.file
        if not path.exists():
            return False
        runs = pd.read_csv(path)
        done = runs[(runs["point"] == point) & (runs["method"] == method)]
        return done["repetition"].nunique() >= repetitions

    def discard(self, point: int, method: str) -> None:
        """Remove the rows of an interrupted (point, method) from every table before it reruns,
        so a resumed run never holds a repetition twice."""
        for table_format in (*fmt.JOB_TABLES, fmt.PROTOCOL_COUNTERS):
            path = self.run_dir / table_format.file
            if path.exists():
                table = pd.read_csv(path, keep_default_na=False)
                keep = ~((table["point"] == point) & (table["method"] == method))
                if not keep.all():
                    table[keep].to_csv(path, index=False)

    def record_network(self, point: int, description: dict[str, Any]) -> None:
        self._network[point] = description
        (self.run_dir / fmt.NETWORK_FILE).write_text(json.dumps(self._network, indent=1))

    def add_repetition(
        self,
        point: Point,
        method: str,
        repetition: int,
        reports: list[dict[str, Any]],
        verdicts: list[Verdict],
        measured: JobMeasurement | None,
        loss_mechanism: str,
        elements: int | None = None,
    ) -> None:
        """Rows of one job: per worker in runs.csv and timeline.csv; the job's measurements
        (``measured``: counters, frames, CPU) unless the job was too short to measure alone.
        ``elements``: the job's, where the point does not fix them (a user's DDP script)."""
        n = len(reports)
        workload = point.workload_info
        elements = workload.elements if elements is None else elements
        tensor_bytes = elements * ELEMENT_BYTES  # float32 and int32 alike
        rows = []
        for rank, (report, verdict) in enumerate(zip(reports, verdicts)):
            stats = report["stats"]
            tat = stats["tat_s"]
            algbw = metrics.algbw_bytes_per_s(tensor_bytes, tat)
            rows.append({
                "point": point.index, "sweep_param": point.sweep_param or "", "sweep_value": "" if point.sweep_value is None else point.sweep_value,
                "method": method, "repetition": repetition, "rank": rank, "n_workers": n, "elements": elements,
                "dtype": point.workload["dtype"], "tensor_bytes": tensor_bytes, "k": point.job.k,
                "pool_size": point.job.pool_size, "link_mbps": point.topology.link_mbps, "loss": point.topology.link_loss,
                "loss_mechanism": loss_mechanism, "tat_s": tat, "ate_per_s": metrics.ate_per_s(elements, tat),
                "algbw_bytes_per_s": algbw, "busbw_bytes_per_s": busbw(algbw, n) if n > 1 else 0.0,
                "packets_sent": stats["packets_sent"], "packets_received": stats["packets_received"],
                "retransmissions": stats["retransmissions"], "timeouts": stats["timeouts"], "duplicates": stats["duplicates"],
                "verified": verdict.verified, "max_abs_error": verdict.max_abs_error,
                "compute_s": workload.compute_s, "workload": workload.name,
                "bytes_sent": stats["bytes_sent"], "bytes_received": stats["bytes_received"],
                "socket_errors": sum(stats["socket_errors"].values()), "socket_errnos": fmt.errnos_text(stats["socket_errors"]),
                "rejected_results": stats["rejected_results"],
            })
        self._append(fmt.RUNS, rows)
        self._append(fmt.TIMELINE, [
            {"point": point.index, "method": method, "repetition": repetition, "rank": rank,
             "t_ms": round(i * bin_ms, 6), "packets_sent": count, "bin_ms": bin_ms}
            for rank, report in enumerate(reports)
            for bin_ms in [round(report["stats"].get("timeline_bin_s", TIMELINE_BIN_S) * 1000, 6)]
            for i, count in enumerate(report["stats"]["timeline"])
        ])
        own = [{"point": point.index, "method": method, "repetition": repetition, "role": "worker", "index": rank, "counter": name,
                "value": value} for rank, report in enumerate(reports) for name, value in report["stats"].get("protocol", {}).items()]
        own += [{"point": point.index, "method": method, "repetition": repetition, "role": "server", "index": index, "counter": name,
                 "value": value} for index, counts in enumerate(measured.servers if measured is not None else ()) for name, value in counts.items()]
        if own:
            self._append(fmt.PROTOCOL_COUNTERS, own)
        if measured is None:
            return
        self._append(fmt.SWITCH_COUNTERS, [
            {"point": point.index, "method": method, "repetition": repetition, "switch": sw, "counter": name, "value": value}
            for sw, values in measured.counters.items() for name, value in values.items()
        ])
        self._append(fmt.SWITCH_FRAMES, [
            {"point": point.index, "method": method, "repetition": repetition, "switch": sw, **accounted}
            for sw, accounted in measured.frames.items()
        ])
        configured = point.topology.link_mbps
        self._append(fmt.FIDELITY, [
            {"point": point.index, "method": method, "repetition": repetition, "host": host,
             "cpu_busy_fraction": round(cpu.busy, 4), "configured_mbps": configured,
             "achieved_mbps": round(max(measured.tx_mbps.values()), 4) if host in measured.counters else "",
             "cpu_user_fraction": round(cpu.user, 4), "cpu_system_fraction": round(cpu.system, 4),
             "cpu_softirq_fraction": "" if cpu.softirq is None else round(cpu.softirq, 4),
             "wall_s": round(measured.wall_s, 4), "cpu_steal_fraction": "" if cpu.steal is None else round(cpu.steal, 4)}
            for host, cpu in measured.cpu.items()
        ])

    # -- the summary -----------------------------------------------------------------------

    def write_summary(self, summary: dict[str, Any]) -> None:
        """Write summary.json: ``summary`` with the run's ``provenance`` (experiments/provenance.py)."""
        summary[fmt.PROVENANCE_KEY] = provenance.record(self.started_from, self.experiment, self.target, self.simulation is not None)
        (self.run_dir / fmt.SUMMARY_FILE).write_text(json.dumps(summary, indent=1, default=str))

    def finalize(self, verified: bool) -> dict[str, Any]:
        runs = pd.read_csv(self.run_dir / fmt.RUNS.file, dtype={"socket_errnos": str}, keep_default_na=False,
                           na_values={column: [""] for column in fmt.RUNS.columns if column != "socket_errnos"})
        fidelity = pd.read_csv(self.run_dir / fmt.FIDELITY.file)
        jobs = runs.groupby(["point", "method", "repetition"], as_index=False).agg(
            tat_s=("tat_s", "max"), elements=("elements", "first"), verified=("verified", "all"),
            retransmissions=("retransmissions", "sum"), k=("k", "first"), link_mbps=("link_mbps", "first"),
            socket_errors=("socket_errors", "sum"), rejected_results=("rejected_results", "sum"),
        )
        jobs["ate_per_s"] = jobs["elements"] / jobs["tat_s"]
        cpu = timed_cpu_samples(fidelity, runs)
        machines = cpu["host"].map(fmt.is_machine).astype(bool)
        processes, machine = cpu[~machines], cpu[machines]
        saturated = processes[processes["cpu_busy_fraction"] >= CPU_SATURATED]
        machine_saturated = machine[machine["cpu_busy_fraction"] >= MACHINE_SATURATED]
        lost = switch_frame_losses(pd.read_csv(self.run_dir / fmt.SWITCH_FRAMES.file))
        resends = resend_counts(pd.read_csv(self.run_dir / fmt.SWITCH_COUNTERS.file))
        points, paced = [], []
        for point in self.experiment.points:
            methods = {}
            for method, group in jobs[jobs["point"] == point.index].groupby("method"):
                registered = by_name(method)
                entry = {
                    "tat_s": float(group["tat_s"].median()),
                    "ate_per_s": float(group["ate_per_s"].median()),
                    "tat_s_min": float(group["tat_s"].min()),
                    "tat_s_max": float(group["tat_s"].max()),
                    "retransmissions": int(group["retransmissions"].sum()),
                    "verified": bool(group["verified"].all()),
                    "socket_errors": int(group["socket_errors"].sum()),
                    "socket_errnos": socket_errnos(runs[(runs["point"] == point.index) & (runs["method"] == method)]),
                    "rejected_results": int(group["rejected_results"].sum()),
                } | retransmission_causes(group, resends if registered.aggregation is not None else {})
                rate = point.topology.link_mbps
                protocol = registered.aggregation
                if protocol is not None and rate is not None:
                    bound = registered.bound(mbps_to_bps(rate), len(point.topology.hosts), point.job.k)
                    entry["line_rate_bound_ate_per_s"] = bound
                    entry["ate_fraction_of_bound"] = entry["ate_per_s"] / bound
                    check = None if protocol.pace is None else pace_check(point, protocol, rate, point.topology.link_loss)
                    if check is not None:
                        entry |= {"pace_bound_ate_per_s": check.pace.ate_per_s, "pace_bound": check.bound,
                                  "ate_fraction_of_pace_bound": entry["ate_per_s"] / check.pace.ate_per_s,
                                  "pace_checked": check.checked}
                        if self.simulation is None:  # a simulated clock has no emulator to fall behind
                            paced.append(paced_by_emulator(group[["point", "method", "repetition", "tat_s"]], check))
                methods[method] = entry
            points.append({"point": point.index, "sweep_param": point.sweep_param, "sweep_value": point.sweep_value,
                           fmt.DATA_PATH_KEY: point.data_path.name, "methods": methods})
        paced_jobs = pd.concat(paced, ignore_index=True) if paced else pd.DataFrame()
        first = self.experiment.points[0]
        summary = {
            "config": self.experiment.name,
            "started_utc": self.started.isoformat(),
            "duration_s": round((datetime.now(timezone.utc) - self.started).total_seconds(), 2),
            "verified": bool(verified and runs["verified"].all()),
            "switch_target": self.target,
            fmt.SIMULATED_KEY: self.simulation is not None,
            fmt.DATA_PATH_KEY: data_path_record(first),
            "workers": len(first.topology.hosts),
            "link_mbps": first.topology.link_mbps,
            "link_mbps_source": self.experiment.link_rate_source,
            "loss": first.topology.link_loss,
            "loss_mechanism": self._network.get(first.index, {}).get("loss_mechanism"),
            "link_delay_ms": max(l.spec.delay_ms for l in first.topology.links),
            "delay_mechanism": self._network.get(first.index, {}).get("delay_mechanism"),
            "aggregation": self._network.get(first.index, {}).get("aggregation"),
            "network": self._network,
            "kept_up": saturated.empty and machine_saturated.empty and lost.empty and paced_jobs.empty,
            "cpu_cores": os.cpu_count(),
            "max_machine_busy_fraction": round(float(machine["cpu_busy_fraction"].max()), 3) if len(machine) else None,
            "max_machine_steal_fraction": steal_peak(machine),
            "saturated_processes": saturated[["point", "method", "repetition", "host", "cpu_busy_fraction"]].to_dict("records"),
            "saturated_jobs": machine_saturated[["point", "method", "repetition", "cpu_busy_fraction"]].to_dict("records"),
            "switch_lost_frames": lost.to_dict("records"),
            "paced_by_emulator": paced_jobs.to_dict("records"),
            "methods": points[0]["methods"],
            "points": points,
        }
        if self.simulation is not None:
            summary[fmt.SIMULATION_KEY] = self.simulation
        self.write_summary(summary)
        return summary


def table_columns(path: Path) -> list[str]:
    """The header of a csv table."""
    with path.open(newline="") as f:
        return next(csv.reader(f), [])


RESEND_WHILE_WAITING = "EV_RETX_IGNORED"
"""The switch's count of updates it had already added to a slot still waiting for another
rank's (docs/dataplane.md): a resend the worker made although nothing was lost."""
RESEND_OF_COMPLETE_SLOT = "EV_RESULT_UNICAST"
"""The switch's count of resends to a slot already complete, which it answers with the
result again: the result was lost on its way, or crossed the resend."""


def socket_errnos(runs: pd.DataFrame) -> dict[str, int]:
    """The errno names of ``runs``' socket errors, each with its count over the rows."""
    total: dict[str, int] = {}
    for text in runs["socket_errnos"]:
        for name, n in fmt.errnos_of(text).items():
            total[name] = total.get(name, 0) + n
    return dict(sorted(total.items()))


def resend_counts(counters: pd.DataFrame) -> dict[tuple[int, str, int], tuple[int, int]]:
    """(point, method, repetition) -> (resends ignored while the slot waited, resends of a
    complete slot answered), summed over the switches, per job measured."""
    jobs = counters[counters["counter"].isin([RESEND_WHILE_WAITING, RESEND_OF_COMPLETE_SLOT])]
    totals = jobs.pivot_table(index=["point", "method", "repetition"], columns="counter", values="value", aggfunc="sum", fill_value=0)
    return {(int(point), str(method), int(repetition)): (int(row.get(RESEND_WHILE_WAITING, 0)), int(row.get(RESEND_OF_COMPLETE_SLOT, 0)))
            for (point, method, repetition), row in totals.iterrows()}


def retransmission_causes(jobs: pd.DataFrame, counts: dict[tuple[int, str, int], tuple[int, int]]) -> dict[str, int | None]:
    """A method's retransmissions (its ``jobs``' rows, workers summed) split by what the
    switch did with them: ignored because the slot still waited for another rank (a rank
    computing longer, not a loss: the worker's timeout fired before the slowest rank's update
    came), answered with the result of a slot already complete (the result was lost, or the
    resend crossed it), and the rest (the update was lost, so the resend was added as the
    first; or the resend itself was lost). Over the jobs whose switch counters were measured
    (a job too short to measure alone has none); None when there is none, or for a method
    whose sums no switch computes (its retransmissions are TCP's)."""
    measured = [(int(job.retransmissions), *counts[key]) for job in jobs.itertuples()
                if (key := (int(job.point), str(job.method), int(job.repetition))) in counts]
    if not measured:
        return {"retransmissions_waiting": None, "retransmissions_slot_complete": None, "retransmissions_after_update_loss": None}
    resent, waiting, complete = (sum(column) for column in zip(*measured))
    return {"retransmissions_waiting": waiting, "retransmissions_slot_complete": complete,
            "retransmissions_after_update_loss": max(0, resent - waiting - complete)}


def switch_frame_losses(frames: pd.DataFrame) -> pd.DataFrame:
    """Jobs in which a switch lost frames that no pipeline counter shows (network/port_counters.py)."""
    lost = [
        frames_lost(lost_in, frames_in) or frames_lost(lost_out, frames_out)
        for lost_in, frames_in, lost_out, frames_out in zip(
            frames["input_lost"], frames["port_rx_frames"], frames["output_lost"], frames["pipeline_out_frames"]
        )
    ]
    return frames[lost]


def format_table(summary: dict[str, Any]) -> str:
    """The short table printed at the end of a run."""
    lines = []
    if fmt.is_simulated(summary):
        lines.append("simulated (run_experiment.py --simulate): times are simulated seconds")
    for point in summary["points"]:
        if point["sweep_param"]:
            lines.append(f"{point['sweep_param']} = {point['sweep_value']}")
        lines.append(f"  {'method':<9} {'TAT s':>9} {'ATE/s':>12} {'bound ATE/s':>12} {'of bound':>8} {'retx':>6} {'waiting':>7} "
                     f"{'verified':>8}")
        for method, m in point["methods"].items():
            bound = m.get("line_rate_bound_ate_per_s")
            bound_text = "" if bound is None else f"{bound:.4g}"
            share_text = "" if bound is None else f"{m['ate_fraction_of_bound']:.1%}"
            waiting = m.get("retransmissions_waiting")
            lines.append(
                f"  {method:<9} {m['tat_s']:>9.4g} {m['ate_per_s']:>12.4g} {bound_text:>12} {share_text:>8} "
                f"{m['retransmissions']:>6} {'' if waiting is None else waiting:>7} {str(m['verified']):>8}"
            )
        for method, model in summary.get(fmt.SIMULATION_KEY, {}).get("baseline_models", {}).get(str(point["point"]), {}).items():
            lines.append(f"  {method + ' *':<9} {model['tat_s']:>9.4g} {model['ate_per_s']:>12.4g} {model['bound_ate_per_s']:>12.4g} "
                         f"{model['efficiency']:>8.1%}  (* a model: {model['model']}, not run)")
    if not summary["kept_up"]:
        lines.append(kept_up_warning(summary))
    return "\n".join(lines)


def steal_peak(machine: pd.DataFrame) -> float | None:
    """The largest share of the machine the hypervisor took over one job (None: not known,
    e.g. a run recorded before the column, or not a VM's counter)."""
    if "cpu_steal_fraction" not in machine or machine["cpu_steal_fraction"].isna().all():
        return None
    return round(float(machine["cpu_steal_fraction"].max()), 3)


STEAL_SHOWN = 0.05
"""A warning names the hypervisor's share once it took at least this much of the machine."""


def kept_up_warning(summary: dict[str, Any]) -> str:
    """Why ``kept_up`` is false, each reason with the summary.json key that lists its jobs."""
    reasons = []
    if summary["saturated_processes"]:
        worst = max(summary["saturated_processes"], key=lambda r: r["cpu_busy_fraction"])
        reasons.append(f"{len(summary['saturated_processes'])} process(es) used >= {CPU_SATURATED:.0%} of a core "
                       f"(worst: {worst['host']} {worst['cpu_busy_fraction']:.0%}; saturated_processes)")
    if summary["saturated_jobs"]:
        reasons.append(f"the machine had < {1 - MACHINE_SATURATED:.0%} idle CPU in {len(summary['saturated_jobs'])} job(s) "
                       "(saturated_jobs)")
    if summary["switch_lost_frames"]:
        worst = max(summary["switch_lost_frames"], key=lambda r: r["input_lost"] + r["output_lost"])
        reasons.append(f"the switch lost frames its counters do not show in {len(summary['switch_lost_frames'])} job(s) "
                       f"(worst: {worst['switch']} {worst['method']} lost {worst['input_lost']} of {worst['port_rx_frames']} "
                       f"frames in, {worst['output_lost']} counted as sent; switch_lost_frames, switch_frames.csv)")
    if summary["paced_by_emulator"]:
        worst = min(summary["paced_by_emulator"], key=lambda r: r["share_of_pace"])
        reasons.append(f"{len(summary['paced_by_emulator'])} in-network job(s) ran slower than {PACE_SHARE:.0%} of the pace "
                       f"their links allow (worst: {worst['share_of_pace']:.1%}; paced_by_emulator)")
    if summary.get("saturated_trainings"):
        reasons.append(f"{len(summary['saturated_trainings'])} training(s) saturated a process or the machine (saturated_trainings)")
    steal = summary.get("max_machine_steal_fraction")
    if steal is not None and steal >= STEAL_SHOWN:
        reasons.append(f"the hypervisor took up to {steal:.0%} of the machine for other guests during a job "
                       "(max_machine_steal_fraction: a shared VM; a quieter time or machine helps)")
    return ("WARNING: the emulator, not the network, set the pace (kept_up false in summary.json): " + "; ".join(reasons))
