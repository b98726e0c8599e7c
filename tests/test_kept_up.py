"""``kept_up`` in summary.json: false whenever the emulator, not the network, set the pace.

Each case writes one job's rows through the real ResultsWriter (the runner's path) with a
chosen TAT and CPU shares, and reads the verdict from its finalize(), as a run would.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from analysis.load import load_results
from analysis.switchml.models import switchml_job_pace, switchml_line_rate_ate
from experiments.config import CONFIG_DIR, load_experiment
from experiments.job_meter import CLOCK_TICKS, CpuSplit, JobMeasurement, machine_cpu
from experiments.pace import BANDWIDTH_BOUND, MIN_PACED_S
from experiments.results import ResultsWriter, format_table, kept_up_warning
from hosts.stats import JobStats
from protocol import results_format as fmt
from protocol.results_format import MACHINE
from methods.verification import Verdict

MAIN_CONFIG = CONFIG_DIR / "8workers.yaml"
QUIET = CpuSplit(user=0.3, system=0.2, softirq=None, busy=0.5)
"""A worker's shares of one core: far from saturated."""
MACHINE_80 = CpuSplit(user=0.4, system=0.25, softirq=0.15, busy=0.8)
"""The machine 80 % busy: 20 % idle, far from MACHINE_SATURATED."""


def finalize_one_job(tmp_path, overrides: list[str], share_of_line_rate: float) -> dict:
    """summary.json of a run of one SwitchML job that reached ``share_of_line_rate`` of its
    line-rate bound, no process or machine saturated, no frame lost."""
    experiment = load_experiment(MAIN_CONFIG, ["methods=[switchml]", "repetitions=1", "switch.target=embedded", *overrides])
    point = experiment.points[0]
    rate_mbps = point.topology.links[0].spec.bw_mbps
    elements = point.workload_info.elements
    tat_s = elements / (share_of_line_rate * switchml_line_rate_ate(rate_mbps * 1e6, point.protocol["k"]))
    n = len(point.topology.hosts)
    stats = dataclasses.asdict(JobStats(tat_s=tat_s, packets_sent=1, packets_received=1, bytes_sent=1, bytes_received=1, timeline=[1]))
    frames = {"port_rx_frames": 1000, "pipeline_in_frames": 1000, "input_lost": 0, "pipeline_out_frames": 1000,
              "port_tx_frames": 1000, "queue_drops": 0, "output_lost": 0}
    measured = JobMeasurement(
        cpu={**{h.name: QUIET for h in point.topology.hosts}, MACHINE: MACHINE_80}, wall_s=tat_s,
        tx_mbps={"s1-eth1": rate_mbps * share_of_line_rate}, counters={"s1": {}}, frames={"s1": frames},
    )
    writer = ResultsWriter(tmp_path, experiment, "embedded")
    writer.add_repetition(point, "switchml", 0, [{"stats": stats}] * n, [Verdict(True, 0.0, "")] * n, measured, "none")
    return writer.finalize(True)


def test_a_job_the_emulator_paced_did_not_keep_up(tmp_path) -> None:
    """The 10 Mbit/s main job that reached 69 % of its bound without loss or a saturated CPU."""
    summary = finalize_one_job(tmp_path, ["topology.link.bw_mbps=10"], 0.69)
    assert not summary["saturated_processes"] and not summary["saturated_jobs"] and not summary["switch_lost_frames"]
    assert summary["kept_up"] is False
    (paced,) = summary["paced_by_emulator"]
    assert paced["share_of_pace"] == pytest.approx(0.69 / summary["methods"]["switchml"]["pace_bound_ate_per_s"]
                                                   * summary["methods"]["switchml"]["line_rate_bound_ate_per_s"], rel=1e-3)
    assert "paced_by_emulator" in format_table(summary)
    assert json.loads((tmp_path / "summary.json").read_text())["kept_up"] is False


def test_a_long_job_near_its_bound_kept_up(tmp_path) -> None:
    summary = finalize_one_job(tmp_path, [], 0.97)
    switchml = summary["methods"]["switchml"]
    assert switchml["pace_checked"] and switchml["pace_bound"] == "line rate"
    assert summary["kept_up"] is True and summary["paced_by_emulator"] == []
    assert "WARNING" not in format_table(summary)


def test_a_short_latency_bound_job_is_not_held_to_the_line_rate(tmp_path) -> None:
    """A training-sized all-reduce (2,410 elements, pool 16) reaches ~80 % of the line-rate
    bound on an idle machine: its lead round and last round trip are a fifth of its time."""
    summary = finalize_one_job(tmp_path, ["workload.elements=2410", "protocol.pool_size=16"], 0.80)
    assert summary["methods"]["switchml"]["pace_checked"] is False
    assert summary["kept_up"] is True


def test_lossy_jobs_have_no_pace_bound(tmp_path) -> None:
    """Under loss a slot waits for its retransmission timeout by design: no pace is checked."""
    summary = finalize_one_job(tmp_path, ["topology.link.loss=0.01"], 0.4)
    assert "pace_checked" not in summary["methods"]["switchml"]
    assert summary["kept_up"] is True


def test_the_writer_writes_the_contract_s_headers_and_keys(tmp_path) -> None:
    """Every per-job table has protocol/results_format.py's header, in its order, and the
    summary every key a reader requires (the reader checks against the same module)."""
    summary = finalize_one_job(tmp_path, [], 0.97)
    for table in fmt.JOB_TABLES:
        assert (tmp_path / table.file).read_text().splitlines()[0] == ",".join(table.columns), table.file
    assert set(fmt.SUMMARY_REQUIRED_KEYS) <= set(summary)
    assert json.loads((tmp_path / fmt.SUMMARY_FILE).read_text()) == json.loads(json.dumps(summary, default=str))


def test_fidelity_rows_split_cpu_and_still_load(tmp_path) -> None:
    finalize_one_job(tmp_path, [], 0.97)
    results = load_results([tmp_path])
    machine = results.fidelity[results.fidelity["host"] == MACHINE].iloc[0]
    assert (machine["cpu_user_fraction"], machine["cpu_system_fraction"], machine["cpu_softirq_fraction"]) == (0.4, 0.25, 0.15)
    worker = results.fidelity[results.fidelity["host"] == "h1"].iloc[0]
    assert worker["cpu_busy_fraction"] == 0.5 and worker["wall_s"] > 0


@pytest.mark.parametrize(
    ("elements", "pool_size", "delay_s", "checked", "window"),
    [
        (131_072, 64, 0.0, True, False),  # the main job: 65 rounds per slot
        (16_384, 64, 0.0, False, False),  # 9 rounds per slot: the lead round is a ninth of the job
        (131_072, 8, 0.010, True, True),  # pool 8 against a 21 ms round trip: the window binds
        (1_024, 64, 0.0, False, False),  # 32 packets: all start and drain
    ],
)
def test_which_jobs_are_bandwidth_bound(elements, pool_size, delay_s, checked, window) -> None:
    pace = switchml_job_pace(elements, 32, pool_size, 2.5e6, delay_s, quantized=True)
    assert pace.window_bound == window
    assert (pace.tat_s >= MIN_PACED_S and pace.streaming_fraction >= BANDWIDTH_BOUND) == checked


def test_window_bound_pace_is_pool_over_round_trip() -> None:
    pace = switchml_job_pace(131_072, 32, 8, 2.5e6, 0.010, quantized=False)
    assert pace.packet_interval_s == pytest.approx(pace.round_trip_s / 8)
    assert pace.ate_per_s < 0.25 * switchml_line_rate_ate(2.5e6, 32)


def test_a_resumed_run_from_before_the_cpu_split_gets_the_new_columns(tmp_path) -> None:
    """fidelity.csv of a run started by a version without the CPU split: resuming appends
    rows with the new columns, the old rows get them empty, and the table still loads."""
    old_columns = ["point", "method", "repetition", "host", "cpu_busy_fraction", "configured_mbps", "achieved_mbps"]
    (tmp_path / "fidelity.csv").write_text(",".join(old_columns) + "\n0,switchml,9,h1,0.5,2.5,\n")
    finalize_one_job(tmp_path, [], 0.97)
    fidelity = load_results([tmp_path]).fidelity
    assert fidelity["cpu_user_fraction"].isna().sum() == 1 and len(fidelity) == 1 + 8 + 1  # old row, 8 workers, machine


@pytest.mark.parametrize(("aggregation", "uplink_mbps", "share"), [("spine", 2.5, 0.25), ("hierarchical", 2.5, 1.0), ("spine", 10, 1.0)])
def test_an_oversubscribed_uplink_paces_the_job_not_the_emulator(aggregation, uplink_mbps, share) -> None:
    """With aggregation at the spine every worker's updates share its leaf's uplink, so a 4:1
    over-subscribed tree (4 workers per leaf, uplink as fast as a host link) runs at a
    quarter of the host link's rate: the network's pace. A leaf that aggregates sends one
    stream up, and an uplink 4x faster carries all four at full rate."""
    experiment = load_experiment(CONFIG_DIR / "hierarchical.yaml", [  # its own sweep replaced by one point of this case's
        f"sweep={{param: topology.uplink.bw_mbps, values: [{uplink_mbps}]}}", f"topology.aggregation={aggregation}",
        "switch.target=embedded"])
    point = experiment.points[0]
    assert point.topology.worker_share_mbps(2.5) == pytest.approx(2.5 * share)


def test_a_process_on_another_server_is_read_there_by_its_pid_and_a_gone_one_is_zero() -> None:
    """JobMeter reads a remote worker's or switch's CPU, and that server's /proc/stat, with
    one command on its server (the ssh client here would be the wrong process); a pid that
    has exited reads as zero."""
    from experiments.job_meter import CLOCK_TICKS, remote_cpu

    stat = "4242 (python3 -m a b) S 1 4242 4242 0 -1 4194560 100 0 0 0 {user} {system} 0 0 20 0 1 0 1 1 1"
    commands: list[str] = []

    def run(command: str) -> str:
        commands.append(command)
        return f"cpu  1 2 3 4 5 6 7 8 0 0\n4242 {stat.format(user=3 * CLOCK_TICKS, system=CLOCK_TICKS)}\n77 \n"

    machine, cpus = remote_cpu(run, [4242, 77])
    assert len(commands) == 1 and "/proc/4242/stat" in commands[0] and "/proc/77/stat" in commands[0]
    assert machine.startswith("cpu ")
    assert cpus == {4242: CpuSplit(3.0, 1.0, None, 4.0), 77: CpuSplit(0.0, 0.0, None, 0.0)}


def test_the_warning_names_the_hypervisors_share_when_it_took_enough() -> None:
    """A shared VM's steal stalls workers without any testbed process being busy (at 20 Mbit/s
    the main job used 11 % of the machine while the hypervisor took 31 %): the warning says so."""
    summary = {"saturated_processes": [], "saturated_jobs": [], "switch_lost_frames": [],
               "paced_by_emulator": [{"share_of_pace": 0.754}], "max_machine_steal_fraction": 0.31}
    warning = kept_up_warning(summary)
    assert "75.4%; paced_by_emulator" in warning and "the hypervisor took up to 31% of the machine" in warning
    assert "hypervisor" not in kept_up_warning({**summary, "max_machine_steal_fraction": 0.01})
    assert "hypervisor" not in kept_up_warning({**summary, "max_machine_steal_fraction": None})


def test_the_machine_split_carries_its_steal() -> None:
    stat = "cpu  100 0 50 800 0 0 20 30 0 0\n"
    split, total = machine_cpu(stat)
    assert split.steal == pytest.approx(30 / CLOCK_TICKS) and split.busy == pytest.approx(200 / CLOCK_TICKS)
    assert (split - split).steal == 0 and split.share_of(total).steal == pytest.approx(30 / 1000)


def test_the_switches_frames_are_accounted_from_one_settled_snapshot() -> None:
    """A frame inside bmv2 while its ingress and then its egress counter are read shows as one
    frame lost (CI: 16,863 in, 16,862 out): the meter reads again until two reads agree."""
    from experiments.job_meter import SETTLED_READS, settled

    reads = iter([{"in": 16_863, "out": 16_862}, {"in": 16_863, "out": 16_863}, {"in": 16_863, "out": 16_863}])
    assert settled(lambda: next(reads)) == {"in": 16_863, "out": 16_863}
    moving = iter(range(100))
    calls = []
    assert settled(lambda: calls.append(1) or next(moving)) == SETTLED_READS - 1 and len(calls) == SETTLED_READS  # never still: the last read


def test_the_switches_counters_are_reset_while_no_frame_passes_their_ports() -> None:
    """A frame between the counters' reset and the ports' baseline is counted by the pipeline
    only (a negative loss of Gloo's frames): the meter resets again until the ports stood still."""
    from experiments.job_meter import SETTLED_READS, reset_while_still

    ports = iter([10, 11, 11])  # a frame passed during the first reset
    resets = []
    assert reset_while_still(lambda: next(ports), lambda: resets.append(1)) == 11 and len(resets) == 2
    busy = iter(range(100))
    resets.clear()
    assert reset_while_still(lambda: next(busy), lambda: resets.append(1)) == SETTLED_READS and len(resets) == SETTLED_READS
