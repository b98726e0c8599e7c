"""The simulated clock (simulation/): the worker's and the switch's own code on simulated
links, exact like emulation, and as fast as the links' models say it must be.

A lossless star must reach the analytic pace of methods/switchml.py (line rate or window,
lead round and last round trip) within a few percent, and every result must equal the
integer sums of the quantized inputs; loss must cost retransmissions but never exactness.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import simpy

from experiments.config import CONFIG_DIR, load_experiment
from experiments.simulated import check_simulable
from hosts.stats import TIMELINE_BIN_S, TIMELINE_MIN_BINS, timeline_bin_for
from hosts.switchml.core import SwitchMLTimeout
from hosts.switchml.timers import RetransmitPolicy, pool_drain_s
import methods as methods_registry
from methods import switchml
from methods.verification import expected_for, integer_sum
from protocol.switchml.packet import frame_bytes
from protocol.params import REPO_ROOT, mbps_to_bps
from simulation.host import ServerHost
from simulation.link import Arrivals, Link
from simulation.network import DROP_SIMULATOR, LINK_LOSS, NATIVE_CORE, PYTHON_CORE, JobSetup, RankStarts, SimulatedNetwork
from simulation.switchml.worker import WorkerSetup, workers as switchml_workers
from switches.control import ControlPlaneError
from switches.targets import REGISTRY
from topologies.model import TOPOLOGY_DIR, load_topology

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

K, POOL = 256, 64
SIMULATED = next(t for t in REGISTRY.values() if t.simulated is not None)
"""The first target with a simulated data plane."""


def network(workers: int, mbps: float, *, delay_ms: float = 0.0, loss: float = 0.0, pool: int = POOL, queue: int = 200,
            loss_mechanism: str = "auto", topology: str = "star.yaml", cost_s: float = 0.0, switch_cost_s: float = 0.0,
            **keys: object) -> SimulatedNetwork:
    link = {"bw_mbps": mbps, "delay_ms": delay_ms, "loss": loss, "queue_packets": queue}
    topo = load_topology(TOPOLOGY_DIR / topology, {"workers": workers, "link": link, **keys})
    floor = max(0.02, 2 * pool_drain_s(pool, K, mbps_to_bps(mbps)))
    policy = RetransmitPolicy(min_s=floor, max_s=max(1.0, floor))
    job = JobSetup(K, pool, 512, 1, switchml_workers(lambda rank: WorkerSetup(rank, workers, 1, K, pool, policy, 60.0, cost_s)))
    net = SimulatedNetwork(topo, SIMULATED, job, loss_mechanism, seed=7, switch_packet_cost_s=switch_cost_s)
    net.reset_aggregation()
    return net


def inputs(workers: int, elements: int, dtype: str = "float32") -> list[np.ndarray]:
    rng = np.random.default_rng(3)
    if dtype == "int32":
        return [rng.integers(-1000, 1000, elements, dtype=np.int32) for _ in range(workers)]
    return [rng.standard_normal(elements).astype(np.float32) for _ in range(workers)]


def run_exact(net: SimulatedNetwork, tensors: list[np.ndarray]) -> float:
    """All-reduce, check every rank's result bit for bit; the job's TAT (slowest worker)."""
    results = net.allreduce(tensors)
    expected = expected_for(tensors, K)
    for result in results:
        verdict = integer_sum(expected, result.values, result.int_sum)
        assert verdict.verified, verdict.detail
    return max(r.stats.tat_s for r in results)


@pytest.mark.parametrize("mbps", [10.0, 100_000.0])
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_a_lossless_star_is_exact_and_at_its_line_rate_pace(mbps: float, dtype: str) -> None:
    tensors = inputs(8, 65_536, dtype)
    tat = run_exact(network(8, mbps), tensors)
    pace = switchml.switchml_job_pace(65_536, K, POOL, mbps_to_bps(mbps), 0.0, quantized=dtype == "float32")
    assert not pace.window_bound
    assert pace.tat_s <= tat <= 1.02 * pace.tat_s, (tat, pace.tat_s)


def test_a_window_bound_pool_runs_at_the_window_pace() -> None:
    """Pool 4 against 2 x 5 ms of delay: each slot sends once per round trip, so the job takes
    its rounds (68 packets / 4 slots) of round trips, plus the serialization of the slots
    queued behind the first. (methods/switchml.py's pace spreads the packets evenly over the
    round trip instead: 17.75 round trips, 3 % above; an upper bound.)"""
    tensors = inputs(4, 16_384)
    tat = run_exact(network(4, 10.0, delay_ms=5.0, pool=4), tensors)
    pace = switchml.switchml_job_pace(16_384, K, 4, mbps_to_bps(10.0), 0.005, quantized=True)
    assert pace.window_bound
    serialization = 8 * frame_bytes(K) / mbps_to_bps(10.0)
    rounds = pace.packets / 4
    assert tat == pytest.approx(rounds * pace.round_trip_s + 3 * serialization, rel=1e-3)
    assert 0.95 * pace.tat_s <= tat <= pace.tat_s


def test_repeated_jobs_continue_shadow_sets_and_sequence_numbers() -> None:
    net = network(4, 1000.0)
    tensors = inputs(4, 20_000)
    first = run_exact(net, tensors)
    assert run_exact(net, tensors) == pytest.approx(first, rel=1e-9)


@pytest.mark.parametrize("mechanism", ["auto", "switch"])
def test_loss_costs_retransmissions_never_exactness(mechanism: str) -> None:
    net = network(4, 100.0, loss=0.01, loss_mechanism=mechanism)
    assert net.loss_mechanism == (DROP_SIMULATOR if mechanism == "switch" else LINK_LOSS)
    tensors = inputs(4, 65_536)
    results = net.allreduce(tensors)
    expected = expected_for(tensors, K)
    assert all(integer_sum(expected, r.values, r.int_sum).verified for r in results)
    assert sum(r.stats.retransmissions for r in results) > 0
    lossless = switchml.switchml_job_pace(65_536, K, POOL, mbps_to_bps(100.0), 0.0, quantized=True).tat_s
    assert max(r.stats.tat_s for r in results) > lossless


def test_a_job_that_cannot_finish_times_out_naming_its_slots() -> None:
    """All but every frame lost: the workers resend until their (simulated) deadline, then say which slots waited."""
    net = network(2, 100.0, loss=0.999)  # a loss of 1 is refused: a percentage typed as a probability
    with pytest.raises(SwitchMLTimeout, match=r"no result after 60\.0\d* s for 4 slot\(s\): slot 0"):
        net.allreduce(inputs(2, 1024))


@pytest.mark.parametrize("aggregation", ["spine", "hierarchical"])
def test_a_tree_aggregates_exactly(aggregation: str) -> None:
    net = network(6, 100.0, topology="tree.yaml", leaves=2, aggregation=aggregation,
                  uplink={"bw_mbps": 400.0, "delay_ms": 0.0, "loss": 0.0, "queue_packets": 400})
    run_exact(net, inputs(6, 32_768))
    counters = net.event_counters()
    aggregated = [name for name, c in counters.items() if c["EV_RESULT_MULTICAST"]]
    assert aggregated == (["s1"] if aggregation == "spine" else ["s1", "s2", "s3"])


def test_a_host_packet_cost_slows_the_job() -> None:
    tensors = inputs(4, 65_536)
    ideal = run_exact(network(4, 100_000.0), tensors)
    slow = run_exact(network(4, 100_000.0, cost_s=1e-6), tensors)
    assert slow > 1.5 * ideal


def test_a_switch_cost_per_frame_takes_the_frames_arriving_together_one_at_a_time() -> None:
    """simulation.switch_packet_cost_us: a round's updates of one chunk reach the switch in one
    instant; its result leaves when the switch is done with the last of them, workers x the
    cost later, in each of the rounds one after the other (a packet of each worker's each)."""
    workers, cost = 4, 3e-5
    tensors = inputs(workers, K)
    ideal = network(workers, 100.0).allreduce(tensors)
    slow = network(workers, 100.0, switch_cost_s=cost).allreduce(tensors)
    rounds = ideal[0].stats.packets_sent
    assert [r.stats.tat_s - i.stats.tat_s for r, i in zip(slow, ideal)] == pytest.approx([rounds * workers * cost] * workers)
    assert all(np.array_equal(r.int_sum, i.int_sum) for r, i in zip(slow, ideal))


def test_a_link_serializes_delays_and_drops_at_its_queue() -> None:
    env = simpy.Environment()
    arrivals: list[tuple[float, int]] = []
    link = Link(env, Arrivals(env), 8e6, 0.5, 3, 0.0, random.Random(1), lambda frames: arrivals.extend((env.now, len(f)) for f in frames))
    for _ in range(5):
        link.send(bytes(1000))  # 1 ms each at 8 Mbit/s
    env.run()
    assert [t for t, _ in arrivals] == pytest.approx([0.501, 0.502, 0.503])
    assert (link.queue_drops, link.frames) == (2, 3)


def test_a_links_bucket_lets_frames_through_while_out_of_debt_as_htb_does() -> None:
    """htb charges a frame's bytes as it leaves (network/shaping.py, HTB_CBURST_BYTES): after
    an idle spell frames cross at once while the bucket is out of debt, the next waits the debt
    out, then the link rate holds; an idle spell fills the bucket again."""
    env = simpy.Environment()
    arrived: list[float] = []
    rate, frame, bucket = 8e6, 1000, 1500
    link = Link(env, Arrivals(env), rate, 0.0, 100, 0.0, random.Random(1), lambda frames: arrived.extend(env.now for _ in frames),
                burst_bytes=bucket)
    for _ in range(4):
        link.send(bytes(frame))
    env.run()
    per_byte, debt = 8 / rate, 2 * frame - bucket
    assert arrived == pytest.approx([0.0, 0.0, debt * per_byte, (debt + frame) * per_byte])
    idle_until = 1.0
    env.run(until=idle_until)
    link.send(bytes(frame))
    env.run()
    assert arrived[-1] == pytest.approx(idle_until)


def test_link_loss_is_its_probability() -> None:
    env = simpy.Environment()
    arrived: list[bytes] = []
    link = Link(env, Arrivals(env), 1e9, 0.0, 100_000, 0.1, random.Random(5), arrived.extend)
    for _ in range(20_000):
        link.send(bytes(100))
    env.run()
    assert link.lost == 20_000 - len(arrived)
    assert 0.09 < link.lost / 20_000 < 0.11


def test_the_simulated_switch_refuses_what_every_target_refuses() -> None:
    control = SIMULATED.simulated(k=K, max_pool_size=8).control()
    with pytest.raises(ControlPlaneError, match="unknown table"):
        control.table_add("SwitchMLIngress.no_such_table", "NoAction", [1])
    with pytest.raises(ControlPlaneError, match="run past the switch's 8 slots"):
        control.table_add("SwitchMLIngress.worker_table", "set_worker", [1, "10.0.0.1"], [0, 1, 2, 2, 4, 8])


def simulate(config: Path, *args: str, out: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(config), "--simulate", *args]
    return subprocess.run(command + (["--out", str(out)] if out else []), capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


def test_simulate_writes_a_run_marked_simulated(tmp_path: Path) -> None:
    import json

    import pandas as pd

    done = simulate(CONFIG_DIR / "8workers.yaml", "--set", "methods=[switchml]", "--set", "workload.elements=65536",
                    "--set", "topology.link.bw_mbps=100000", "--set", "repetitions=2", out=tmp_path / "run")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["simulated"] is True and summary["simulation"]["engine"] == "simpy"
    assert summary["verified"] and summary["network"]["0"]["simulated"]
    runs = pd.read_csv(tmp_path / "run" / "runs.csv")
    assert len(runs) == 16 and runs["verified"].all()
    pace = switchml.switchml_job_pace(65_536, K, POOL, mbps_to_bps(100_000), 0.0, quantized=True).tat_s
    assert runs["tat_s"].max() == pytest.approx(pace, rel=0.02)
    assert "simulated" in done.stdout


def test_simulate_gives_the_baselines_as_labelled_models(tmp_path: Path) -> None:
    import json

    done = simulate(CONFIG_DIR / "8workers.yaml", "--set", "workload.elements=65536", "--set", "topology.link.bw_mbps=100000",
                    "--set", "repetitions=1", "--set", "simulation.baseline_efficiency=0.5", out=tmp_path / "run")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    models = summary["simulation"]["baseline_models"]["0"]
    assert set(models) == {"ring", "ps"} and set(summary["methods"]) == {"switchml"}, "models are not runs"
    ring_bound = methods_registry.by_name("ring").bound(mbps_to_bps(100_000), 8, K)
    assert models["ring"]["tat_s"] == pytest.approx(65_536 / (0.5 * ring_bound))
    assert "a model" in done.stdout


@pytest.mark.parametrize(("config", "args", "says"), [
    ("8workers.yaml", ("--set", "methods=[ring]"), "add an in-network method to methods (switchml, atp)"),
    ("training_torch.yaml", (), "torch experiments run PyTorch processes on the hosts"),
    ("ddp_script.yaml", (), "ddp_script experiments run PyTorch processes on the hosts"),
])
def test_simulate_refuses_what_it_cannot_run_in_one_line(config: str, args: tuple[str, ...], says: str) -> None:
    done = simulate(CONFIG_DIR / config, *args, "--dry-run")
    assert done.returncode == 2, done.stderr
    [line] = [l for l in done.stderr.splitlines() if "ERROR" in l]
    assert says in line


def test_a_numpy_training_trains_on_the_simulated_clock(tmp_path: Path) -> None:
    """The training kind's one runner on the simulated clock: every step of SwitchML's training
    verified against the runner's replay (each rank's gradient, result and parameters), the
    baselines given by their model and trained by none."""
    import json

    import pandas as pd

    done = simulate(CONFIG_DIR / "training_convergence.yaml", "--set", "workload.steps=4", "--set", "methods=[switchml,ring]",
                    out=tmp_path / "run")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["simulated"] and summary["verified"]
    assert set(summary["simulation"]["baseline_models"]["0"]) == {"ring"}
    steps = pd.read_csv(tmp_path / "run" / "training_steps.csv")
    network = steps[steps["source"] == "network"]
    assert list(network["series"].unique()) == ["switchml"] and list(network["step"]) == [0, 1, 2, 3, 4]
    assert network["verified"].all() and (network.loc[network["step"] > 0, "allreduce_s"] > 0).all()


EMULATED = REPO_ROOT / "tests" / "data" / "results_small"
"""Real emulated runs (embedded switch, 2.5 Mbit/s, 4 workers: their README says how they were made)."""
VALIDATION_SHARE = 0.05


@pytest.mark.parametrize("run", ["tat_vs_size", "pool_size_sensitivity", "ate_vs_workers"])
def test_simulated_tat_is_within_5_percent_of_emulated_tat(run: str, tmp_path: Path) -> None:
    """Each emulated run's own config again on the simulated clock: every point whose pace the
    emulator's check trusts (experiments/pace.py: long, lossless, bandwidth-bound or windowed)
    must take the emulated TAT within 5 %. (Shorter jobs are start and drain, where the
    emulator's per-job costs and htb's burst weigh most: benchmarks/README.md, "Simulated
    against emulated".)"""
    import json

    from experiments.config import load_experiment
    from experiments.pace import pace_check

    config = EMULATED / run / "config.yaml"
    done = simulate(config, "--set", "methods=[switchml]", out=tmp_path / "sim")  # the run's own target: its rate and contract
    assert done.returncode == 0, done.stderr
    emulated = json.loads((EMULATED / run / "summary.json").read_text())["points"]
    simulated = json.loads((tmp_path / "sim" / "summary.json").read_text())["points"]
    checked = 0
    for point, theirs, ours in zip(load_experiment(config).points, emulated, simulated):
        check = pace_check(point, methods_registry.SWITCHML.aggregation, point.topology.link_mbps, point.topology.link_loss)
        if check is None or not check.checked:
            continue
        checked += 1
        want, got = theirs["methods"]["switchml"]["tat_s"], ours["methods"]["switchml"]["tat_s"]
        assert abs(got / want - 1) <= VALIDATION_SHARE, f"point {point.index}: simulated {got:.4f} s, emulated {want:.4f} s"
    assert checked, "no point of the run is one the pace check trusts"


def test_the_analysis_labels_simulated_runs(tmp_path: Path) -> None:
    from analysis.context import emulation_context
    from analysis.load import load_results

    done = simulate(CONFIG_DIR / "8workers.yaml", "--set", "methods=[switchml]", "--set", "workload.elements=4096",
                    "--set", "repetitions=1", out=tmp_path / "sim")
    assert done.returncode == 0, done.stderr
    simulated = emulation_context(load_results([tmp_path / "sim"]))
    assert simulated.describe().startswith("Simulation (") and simulated.kept_up
    mixed = load_results([tmp_path / "sim", EMULATED / "tat_vs_size"])
    assert emulation_context(mixed).describe().startswith("Emulation and simulation")
    assert emulation_context(load_results([EMULATED / "tat_vs_size"])).describe().startswith("Emulation:")
    assert list(mixed.on_clock(simulated=True).summary["run"]) == ["sim"], "--clock simulated keeps the simulated run only"
    assert list(mixed.on_clock(simulated=False).summary["run"]) == ["tat_vs_size"]
    assert set(mixed.on_clock(simulated=False).runs["run"]) == {"tat_vs_size"}


def test_a_simulated_job_that_misses_its_deadline_fails_the_run_in_one_line(tmp_path: Path) -> None:
    done = simulate(CONFIG_DIR / "8workers.yaml", "--set", "methods=[switchml]", "--set", "workload.elements=4096",
                    "--set", "topology.link.bw_mbps=1000", "--set", "topology.link.loss=0.999", "--set", "limits.job_timeout_s=2",
                    "--set", "repetitions=1", out=tmp_path / "run")
    assert done.returncode == 3, done.stderr
    [line] = [l for l in done.stderr.splitlines() if "ERROR" in l]
    assert "(simulated): SwitchML job 1 rank 0: no result after 2" in line and "Traceback" not in done.stderr


def test_a_run_resumes_only_on_its_own_clock(tmp_path: Path) -> None:
    import shutil

    done = simulate(CONFIG_DIR / "8workers.yaml", "--set", "methods=[switchml]", "--set", "workload.elements=4096",
                    "--set", "repetitions=2", out=tmp_path / "sim")
    assert done.returncode == 0, done.stderr
    (tmp_path / "sim" / "summary.json").unlink()  # as if interrupted after its last repetition
    resumed = simulate(tmp_path / "sim" / "config.yaml", "--resume", str(tmp_path / "sim"))
    assert resumed.returncode == 0, resumed.stderr
    assert "skipped (resume)" in resumed.stderr
    emulated = tmp_path / "emulated"
    shutil.copytree(EMULATED / "tat_vs_size", emulated)
    (emulated / "summary.json").unlink()
    refused = simulate(emulated / "config.yaml", "--resume", str(emulated))
    assert refused.returncode == 2
    assert "that run ran emulated; resume it without --simulate" in refused.stderr


def test_jobs_sharing_a_simulated_switch_each_get_their_own_slots(tmp_path: Path) -> None:
    """configs/shared_switch.yaml's four jobs at once: each exact, and each as fast as alone
    (their hosts' links are their own, so sharing the switch costs them nothing)."""
    import json

    done = simulate(CONFIG_DIR / "shared_switch.yaml", "--set", "repetitions=1", out=tmp_path / "run")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["simulated"] and summary["kind"] == "shared_switch" and summary["verified"]
    alone, together = summary["points"][0]["jobs"]["11"], summary["points"][2]["jobs"]
    assert len(together) == 4 and together["11"]["tat_s"] == pytest.approx(alone["tat_s"], rel=1e-6)
    drawn = subprocess.run([sys.executable, "-m", "analysis", str(tmp_path / "run"), "--out", str(tmp_path / "figures")],
                           capture_output=True, text=True, timeout=300, cwd=REPO_ROOT)
    assert drawn.returncode == 0, drawn.stderr
    assert (tmp_path / "figures" / "shared_switch.png").is_file()


SHIPPED_CONFIGS = sorted(p for p in CONFIG_DIR.glob("*.yaml") if not p.name.endswith(".schema.yaml"))


@pytest.mark.parametrize("config", SHIPPED_CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_simulates_but_the_pytorch_ones(config: Path, caplog: pytest.LogCaptureFixture) -> None:
    """--simulate takes every config in configs/ (a dry run: the checks a run makes before its
    first frame) whatever its kind, through the one network interface; a kind whose hosts run
    PyTorch processes (``ExperimentKind.emulated_only``) is refused in one line naming it."""
    import run_experiment
    from experiments.config import load_experiment
    from experiments.kinds import kind_of

    kind = kind_of(load_experiment(config))
    status = run_experiment.main([str(config), "--simulate", "--dry-run"])
    assert status == (2 if kind.emulated_only else 0), caplog.text
    if kind.emulated_only:
        assert f"{kind.name} experiments run PyTorch processes on the hosts" in caplog.text


@pytest.mark.parametrize("mbps", [10.0, 100_000.0])
def test_the_send_timeline_has_bins_to_show_a_short_job(mbps: float) -> None:
    """A job of a millisecond at 100 Gbit/s in 10 ms bins is one bin: its timeline is drawn in
    bins that split it into at least TIMELINE_MIN_BINS; a job of seconds keeps the paper's 10 ms."""
    results = network(4, mbps).allreduce(inputs(4, 262_144))
    for result in results:
        stats = result.stats
        assert 0.8 * stats.tat_s <= len(stats.timeline) * stats.timeline_bin_s <= stats.tat_s + stats.timeline_bin_s  # sending spans the job
        assert len(stats.timeline) >= TIMELINE_MIN_BINS
        assert stats.timeline_bin_s == (TIMELINE_BIN_S if mbps == 10.0 else pytest.approx(2e-6))  # 88 µs of frames / 20: 4.4 µs
        assert sum(stats.timeline) == stats.packets_sent


def test_timeline_bins_are_1_2_5_steps_of_a_twentieth_of_the_job() -> None:
    assert timeline_bin_for(10.0) == TIMELINE_BIN_S
    assert timeline_bin_for(0.2) == TIMELINE_BIN_S
    assert timeline_bin_for(0.1) == pytest.approx(0.005)
    assert timeline_bin_for(1.42e-3) == pytest.approx(50e-6)
    assert timeline_bin_for(1e-9) == pytest.approx(1e-6)


def header_line(run: subprocess.CompletedProcess[str]) -> str:
    """A dry run's first line: the experiment, its switch target and its links' rate."""
    return next(line for line in run.stdout.splitlines() if line.startswith("experiment "))


def test_simulate_takes_the_network_an_emulated_run_takes_here() -> None:
    """With no overrides, --simulate resolves ``switch.target: auto`` and ``bw_mbps: target``
    as the emulated run of the same config does on this machine (issue 41: it used to take
    the embedded switch's rate whichever target the emulated run got)."""
    config = CONFIG_DIR / "8workers.yaml"
    emulated = subprocess.run([sys.executable, str(REPO_ROOT / "run_experiment.py"), str(config), "--dry-run"], capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL)
    simulated = simulate(config, "--dry-run")
    assert emulated.returncode == 0 and simulated.returncode == 0, emulated.stderr + simulated.stderr
    if "only root can find out" in emulated.stderr:
        pytest.skip("not root: which target an emulated run takes here only root can tell")
    assert header_line(simulated) == header_line(emulated)


@pytest.mark.parametrize("target", sorted(REGISTRY))
def test_simulate_runs_every_target_on_the_shared_contract(target: str, tmp_path: Path) -> None:
    """``--simulate --switch T`` runs for every target, at T's link rate, and network.json
    says which data plane stood for T's."""
    import json

    done = simulate(CONFIG_DIR / "8workers.yaml", "--switch", target, "--set", "methods=[switchml]", "--set", "workload.elements=4096",
                    "--set", "repetitions=1", out=tmp_path / "sim")
    assert done.returncode == 0, done.stderr
    network = json.loads((tmp_path / "sim" / "network.json").read_text())["0"]
    assert network["target"] == target
    plane = REGISTRY[target] if REGISTRY[target].simulated is not None else SIMULATED
    assert (network["data_plane"] == target) == (plane.name == target)
    rate = REGISTRY[target].link_mbps(K)
    assert {link["bandwidth"] for link in network["links"]} == {f"{rate:g} Mbit/s"}


class EchoCore:
    """A server core that answers each datagram with itself, noting when it was handed it."""

    def __init__(self) -> None:
        self.handed: list[float] = []

    def receive(self, now: float, frames: list[bytes]) -> list[bytes]:
        self.handed += [now] * len(frames)
        return frames


def test_a_server_with_a_cost_per_datagram_answers_them_one_at_a_time() -> None:
    """simulation.server_packet_cost_us: datagrams arriving together wait for each other; one
    arriving after an idle spell waits only its own cost; with no cost each is answered at once."""
    cost = 1e-4
    env = simpy.Environment()
    answered: list[float] = []
    server = ServerHost(env, EchoCore(), cost)
    server.uplink = Link(env, Arrivals(env), 1e12, 0.0, 100, 0.0, random.Random(1), lambda frames: answered.extend(env.now for _ in frames))
    server.deliver([bytes(10)] * 3)
    env.run()
    idle_until = 1.0
    env.run(until=idle_until)
    server.deliver([bytes(10)])
    env.run()
    assert answered == pytest.approx([cost, 2 * cost, 3 * cost, idle_until + cost], abs=1e-9)
    ideal = ServerHost(env, EchoCore())
    ideal.uplink = server.uplink
    ideal.deliver([bytes(10)] * 2)
    env.run()
    assert answered[-2:] == pytest.approx([env.now] * 2)


def test_a_rank_start_skew_starts_each_rank_that_much_after_the_one_before() -> None:
    """simulation.rank_start_skew_us: every rank ends with the job's last result, so a rank
    started r skews later takes r skews less; with no skew the ranks' TATs are equal."""
    workers, skew = 4, 0.003
    tensors = inputs(workers, 4 * K * POOL)
    together = network(workers, 100.0).run_jobs([(range(workers), tensors, 0.0)])[0]
    skewed = network(workers, 100.0).run_jobs([(range(workers), tensors, 0.0)], starts=RankStarts(skew))[0]
    assert len({r.stats.tat_s for r in together}) == 1
    assert [skewed[0].stats.tat_s - r.stats.tat_s for r in skewed] == pytest.approx([rank * skew for rank in range(workers)])
    assert all(np.array_equal(a.int_sum, b.int_sum) for a, b in zip(skewed, together))


def test_a_rank_start_jitter_draws_each_ranks_start_anew_for_every_release_from_the_seed() -> None:
    """simulation.rank_start_jitter_us: a rank's TAT shortens by its drawn delay, which differs
    from rank to rank and from one release to the next, is the same for the same seed, and
    averages the jitter (the exponential's mean) over many ranks; the sums are untouched."""
    workers, jitter = 4, 0.002
    tensors = inputs(workers, K * POOL)
    ideal = network(workers, 100.0).run_jobs([(range(workers), tensors, 0.0)])[0][0].stats.tat_s

    def offsets(net: SimulatedNetwork) -> list[float]:
        """Each rank's start after the job's first rank, from the TATs (every rank ends with
        the job's last result, the ideal TAT after the last rank started)."""
        results = net.run_jobs([(range(workers), tensors, 0.0)], starts=RankStarts(jitter_s=jitter))[0]
        tats = [r.stats.tat_s for r in results]
        assert min(tats) == pytest.approx(ideal, rel=1e-3)
        assert all(np.array_equal(r.int_sum, results[0].int_sum) for r in results)
        return [max(tats) - tat for tat in tats]

    net, again = network(workers, 100.0), network(workers, 100.0)
    releases = [offsets(net) for _ in range(40)]
    assert releases[:2] == [offsets(again), offsets(again)]
    assert releases[0] != releases[1] and len(set(releases[0])) == workers
    assert 0.5 * jitter < np.mean([max(o) for o in releases]) / sum(1 / i for i in range(1, workers)) < 1.5 * jitter


@pytest.mark.parametrize("override", ["simulation.switch_packet_cost_us=28.1", "simulation.rank_start_jitter_us=500"])
def test_a_switch_cost_or_drawn_starts_take_switchml_off_its_native_loop_saying_why(override: str) -> None:
    """star.c's loop processes every frame at its arrival and releases every rank at once, so a
    config with either runs SwitchML's core on SimPy, its data_path naming the key."""
    switchml_protocol = methods_registry.by_name("switchml").aggregation
    plain = check_simulable(load_experiment(CONFIG_DIR / "8workers.yaml", ["methods=[switchml]", "switch.target=embedded"]))
    if plain.points[0].data_path_of(switchml_protocol).name != NATIVE_CORE:
        pytest.skip(f"no native loop here: {plain.points[0].data_path_of(switchml_protocol).reason}")
    with_it = check_simulable(load_experiment(CONFIG_DIR / "8workers.yaml", ["methods=[switchml]", "switch.target=embedded", override]))
    path = with_it.points[0].data_path_of(switchml_protocol)
    assert path.name == PYTHON_CORE
    assert override.split("=")[0].removeprefix("simulation.") in path.reason
