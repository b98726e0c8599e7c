"""The results format (docs/results-format.md): what a run writes and the analysis reads.

The writers (experiments/results.py, experiments/kinds/training_results.py and shared_switch.py) and the reader
(analysis/) all import this module, so a file name, a column or a summary key that one side
writes and the other expects is written down once. The meaning of each column is in
docs/results-format.md; the order here is the order of the files' headers.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CONFIG_FILE = "config.yaml"
"""The resolved config a run ran with (and is resumed with)."""
SUMMARY_FILE = "summary.json"
"""Written last: a folder without it is an interrupted or failed run."""

MACHINE = "machine"
"""fidelity.csv's row for the whole machine: busy share of all cores (from /proc/stat)."""


def is_machine(host: str) -> bool:
    """Whether a fidelity.csv row is a whole machine's share: this one (MACHINE), or another
    server of a cluster (``machine@<server>``), not a process's."""
    return host == MACHINE or host.startswith(f"{MACHINE}@")


@dataclass(frozen=True)
class Table:
    """One csv file of a run: its name, its header, and what a reader cannot do without."""

    file: str
    columns: tuple[str, ...]
    optional: tuple[str, ...] = ()
    """Columns runs of an older version lack; a reader must not require them."""

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(column for column in self.columns if column not in self.optional)


RUNS = Table("runs.csv", (
    "point", "sweep_param", "sweep_value", "method", "repetition", "rank", "n_workers", "elements", "dtype",
    "tensor_bytes", "k", "pool_size", "link_mbps", "loss", "loss_mechanism", "tat_s", "ate_per_s",
    "algbw_bytes_per_s", "busbw_bytes_per_s", "packets_sent", "packets_received", "retransmissions", "timeouts",
    "duplicates", "verified", "max_abs_error", "compute_s", "workload", "bytes_sent", "bytes_received",
    "socket_errors", "socket_errnos", "rejected_results",
), optional=("bytes_sent", "bytes_received", "socket_errors", "socket_errnos", "rejected_results"))  # fmt: skip
def errnos_text(counts: dict[str, int]) -> str:
    """runs.csv's ``socket_errnos``: ``ECONNREFUSED=3 EMSGSIZE=1`` (errno names in order; empty for none)."""
    return " ".join(f"{name}={n}" for name, n in sorted(counts.items()) if n)


def errnos_of(text: str) -> dict[str, int]:
    """``socket_errnos`` back into errno name -> count (errnos_text's inverse)."""
    return {name: int(n) for name, n in (item.split("=") for item in text.split())}


SWITCH_COUNTERS = Table("switch_counters.csv", ("point", "method", "repetition", "switch", "counter", "value"))
SWITCH_FRAMES = Table("switch_frames.csv", (
    "point", "method", "repetition", "switch", "port_rx_frames", "pipeline_in_frames", "input_lost",
    "pipeline_out_frames", "port_tx_frames", "queue_drops", "output_lost",
))  # fmt: skip
TIMELINE = Table("timeline.csv", ("point", "method", "repetition", "rank", "t_ms", "packets_sent", "bin_ms"), optional=("bin_ms",))
"""``bin_ms``: the bin's width (10, or finer for a short simulated job); older runs lack it: 10."""
FIDELITY = Table(
    "fidelity.csv",
    ("point", "method", "repetition", "host", "cpu_busy_fraction", "configured_mbps", "achieved_mbps",
     "cpu_user_fraction", "cpu_system_fraction", "cpu_softirq_fraction", "wall_s", "cpu_steal_fraction"),
    optional=("cpu_user_fraction", "cpu_system_fraction", "cpu_softirq_fraction", "wall_s", "cpu_steal_fraction"),
)  # fmt: skip
PROTOCOL_COUNTERS = Table("protocol_counters.csv", ("point", "method", "repetition", "role", "index", "counter", "value"))
"""An in-network protocol's own counts beyond runs.csv's, per job: each worker's (``role``
worker, ``index`` its rank: ``JobStats.protocol``, e.g. ATP's collisions adopted, resends by
cause, the window at the end) and each of its job's servers' (``role`` server, ``index``
which: ATP's parameter server's full and partial sums). Written only for a protocol that
counts any (not SwitchML's runs)."""
JOB_TABLES = (RUNS, SWITCH_COUNTERS, SWITCH_FRAMES, TIMELINE, FIDELITY)
"""The tables with rows per (point, method, repetition): what a resumed run discards of an
interrupted method before it reruns."""

TRAINING_STEPS = Table("training_steps.csv", (
    "series", "method", "source", "bits", "step", "loss", "train_accuracy", "test_accuracy", "max_param_diff",
    "allreduce_s", "compute_s", "step_s", "emulated_time_s", "bytes_sent", "verified", "bytes_received",
), optional=("bytes_sent", "bytes_received"))  # fmt: skip
TRAINING_SUMMARY = Table("training_summary.csv", (
    "series", "method", "source", "bits", "steps", "final_loss", "final_train_accuracy", "final_test_accuracy",
    "test_accuracy_diff_pp", "final_param_diff", "max_param_diff", "target_accuracy", "steps_to_target",
    "time_to_target_s", "emulated_time_s", "allreduce_s_median", "verified",
))  # fmt: skip
JOBS = Table("jobs.csv", (
    "point", "n_jobs", "repetition", "job_id", "rank", "n_workers", "elements", "pool_size",
    "start_s", "released_s", "tat_s", "ate_per_s", "retransmissions", "verified", "max_abs_error", "link_mbps", "k",
    "machine_busy_fraction",
))  # fmt: skip
"""A shared-switch run's one table (docs/results-format.md, "Shared-switch runs")."""

SUMMARY_REQUIRED_KEYS = ("config", "started_utc", "switch_target", "link_mbps", "kept_up")
"""The summary.json keys every run has and a reader may rely on."""
SIMULATED_KEY = "simulated"
"""summary.json: true for a run on the simulated clock (run_experiment.py --simulate), false
for an emulated one; runs written before the key existed lack it (emulated: ``is_simulated``)."""
SIMULATION_KEY = "simulation"
PROVENANCE_KEY = "provenance"
"""summary.json: the code (version, commit, dirty), the machine (kernel), the tools and the
link rate a run used, and its command line; runs written before 0.2.0 lack it."""
"""summary.json of a simulated run: the simulator's models and parameters."""


def is_simulated(summary: dict) -> bool:
    """Whether a run's summary.json is a simulated run's."""
    return bool(summary.get(SIMULATED_KEY, False))


DATA_PATH_KEY = "data_path"
"""summary.json: the in-network worker's loop, ``{"protocol", "requested", "used", "reason"}``;
each of its points: the loop that ran there (``used``)."""
EARLIER_DATA_PATH_SUFFIX = "_" + DATA_PATH_KEY
"""Runs written before in-network aggregation became a plug-in axis call ``DATA_PATH_KEY``
``<protocol>_data_path``, naming the one protocol they ran in the key rather than in the
record (docs/results-format.md)."""


def data_path_of(record: dict) -> Any:
    """A summary's or a point's data path, under its current key or its earlier one, whose
    protocol it then names as the current one does (None: neither)."""
    if DATA_PATH_KEY in record:
        return record[DATA_PATH_KEY]
    earlier = [key for key in record if key.endswith(EARLIER_DATA_PATH_SUFFIX)]
    if not earlier:
        return None
    [key] = earlier
    value = record[key]
    return {"protocol": key.removesuffix(EARLIER_DATA_PATH_SUFFIX), **value} if isinstance(value, dict) else value


SHARED_SWITCH_KIND = "shared_switch"
"""summary.json ``kind`` of a shared-switch run (other runs have no ``kind``)."""
TEXT_COLUMNS = ("sweep_param", "sweep_value", "method", "workload", "host", "switch", "socket_errnos")
"""Columns that are text even when every value looks numeric or is empty."""


NETWORK_FILE = "network.json"
"""Each point's network as it ran, with ``simulated`` true for a point on the simulated clock."""


def ran_simulated(run_dir: Path) -> bool:
    """Whether the points ``run_dir`` recorded ran on the simulated clock (network.json; a run
    that recorded none yet, or whose record is unreadable, counts as emulated)."""
    try:
        points = json.loads((run_dir / NETWORK_FILE).read_text()).values()
        return any(bool(point.get("simulated", False)) for point in points)
    except (OSError, ValueError, AttributeError):
        return False


def resume_command(run_dir: Path, simulated: bool | None = None) -> str:
    """The command that continues ``run_dir`` (its own config.yaml is the config it ran with),
    quoted for a shell, so that it can be pasted back whatever the path holds; with
    ``--simulate`` for a run on the simulated clock (``simulated``; None: as its network.json
    records), since a resume must keep the run's clock."""
    simulate = ran_simulated(run_dir) if simulated is None else simulated
    return shlex.join(["run_experiment.py", str(run_dir / CONFIG_FILE), "--resume", str(run_dir), *(["--simulate"] if simulate else [])])
