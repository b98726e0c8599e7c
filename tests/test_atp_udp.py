"""ATP's socket drivers: workers (ATPClient) and parameter servers over real UDP sockets on
loopback, with the embedded ATP pipeline relaying between them (tests/atp_relay.py).

Every job must end with every worker holding the exact integer sum protocol/atp/quantize.py
says a correct job produces, also under loss, duplicates and reordering on every hop, with
two jobs hashed onto the same aggregators, and with hostile datagrams thrown at both ends,
which are counted and dropped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import methods
from hosts.atp.client import ATPClient
from hosts.atp.core import ServerHostCore
from hosts.atp.server import ParameterServer, parameter_server
from methods.verification import expected_for
from protocol.atp import params
from protocol.atp.job import ATPParameters
from protocol.atp.packet import ATPHeader, encode_payload, payload_bytes
from protocol.atp.quantize import expected_sum
from protocol.params import REPO_ROOT
from protocol.worker_spec import WorkerSpec
from tests.atp_network import Faults
from tests.atp_relay import PS_HOST, RelayJob, UDPRelay, job_address, wait_bound

K = 32
PARAMETERS = ATPParameters(k=K, pool_size=64, job_id=1, window=16, exponent=1, resend_timeout_ms=5.0, congestion_control=True,
                           ecn_threshold=params.DEFAULT_ECN_THRESHOLD)


DATA_PATHS = ("python", "native")
"""The worker's two loops (hosts/atp/client.py's, hosts/atp/native's worker.c): the scenarios with
loss, collisions and hostile datagrams run on both."""


def tensors(seed: int, n: int, length: int, dtype: type = np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == np.int32:
        return [rng.integers(-(2**31), 2**31, length, dtype=np.int64).astype(np.int32) for _ in range(n)]
    return [rng.uniform(-2, 2, length).astype(np.float32) for _ in range(n)]


class UDPJob:
    """A job's clients and PS on loopback, attached to the relay; ``allreduce`` runs every rank at once."""

    def __init__(self, relay: UDPRelay, parameters: ATPParameters, n_workers: int, deadline_s: float = 30.0,
                 data_path: str = "python") -> None:
        job_id = parameters.job_id
        self.clients = [ATPClient(rank, n_workers, parameters, relay.ps_address, relay.switch_address,
                                  bind_ipv4=job_address(relay.net, job_id, rank + 1), bind_port=0, job_deadline_s=deadline_s,
                                  data_path=data_path)
                        for rank in range(n_workers)]
        self.ps = ParameterServer(parameters, n_workers, relay.switch_address, (job_address(relay.net, job_id, PS_HOST), 0))
        relay.add_job(RelayJob(job_id, [client.address for client in self.clients], self.ps.address))
        self._stop = threading.Event()
        self._ps_thread = threading.Thread(target=self.ps.run, args=(self._stop,), daemon=True)
        self._ps_thread.start()

    def allreduce(self, inputs: list[np.ndarray]) -> list:
        with ThreadPoolExecutor(len(self.clients)) as pool:
            return list(pool.map(lambda pair: pair[0].allreduce(pair[1]), zip(self.clients, inputs)))

    def close(self) -> None:
        self._stop.set()
        self._ps_thread.join(timeout=5)
        self.ps.close()
        for client in self.clients:
            client.close()


def assert_exact(results: list, inputs: list[np.ndarray], exponent: int) -> None:
    want = expected_sum(inputs, len(inputs), exponent)
    for rank, result in enumerate(results):
        assert np.array_equal(result.int_sum, want.int_sum), f"rank {rank}'s integer sum"
        assert np.array_equal(result.values, want.values), f"rank {rank}'s values"


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_an_all_reduce_over_udp_through_the_switch_is_exact_and_verifies(dtype: type) -> None:
    """Two all-reduces in a row (the sequence keeps counting), checked by ATP's own verifier."""
    with UDPRelay(K, PARAMETERS.pool_size) as relay:
        job = UDPJob(relay, PARAMETERS, 3)
        try:
            for seed in (1, 2):
                inputs = tensors(seed, 3, 1000, dtype)
                results = job.allreduce(inputs)
                assert_exact(results, inputs, PARAMETERS.exponent)
                expected = expected_for(inputs, K, methods.own_sums(["atp"], config_section(PARAMETERS)))
                for result in results:
                    assert methods.by_name("atp").verify(expected, result.values, result.int_sum).verified
        finally:
            job.close()
    ps = job.ps.core.stats
    assert ps.sequences_from_switch + ps.sequences_from_parts == 2 * -(-1000 // K), "each sequence finished once at the PS"
    assert results[0].stats.packets_sent >= -(-1000 // K)


def config_section(parameters: ATPParameters) -> dict:
    """The config's protocol section these parameters come from."""
    return {"k": parameters.k, "pool_size": parameters.pool_size, "job_id": parameters.job_id, "data_path": "auto",
            "atp": {"window": parameters.window, "exponent": parameters.exponent, "resend_timeout_ms": parameters.resend_timeout_ms,
                    "congestion_control": parameters.congestion_control, "ecn_threshold": parameters.ecn_threshold}}


def test_the_verifier_refuses_a_sum_one_unit_off() -> None:
    inputs = tensors(3, 2, 100)
    expected = expected_for(inputs, K, methods.own_sums(["atp"], config_section(PARAMETERS)))
    want = expected.own["atp"]
    atp = methods.by_name("atp")
    assert atp.verify(expected, want.values, want.int_sum).verified
    off = want.int_sum.copy()
    off[7] += 1
    assert not atp.verify(expected, want.values, off).verified
    assert "no expected atp sum" in atp.verify(expected_for(inputs, K), want.values, want.int_sum).detail


@pytest.mark.parametrize("data_path", DATA_PATHS)
def test_loss_duplicates_and_reordering_on_every_hop_end_exact(data_path: str) -> None:
    faults = Faults(seed=5, loss=0.03, duplicate=0.03, reorder=0.03)
    with UDPRelay(K, PARAMETERS.pool_size, faults=faults) as relay:
        job = UDPJob(relay, PARAMETERS, 3, data_path=data_path)
        try:
            inputs = tensors(4, 3, 3000)
            results = job.allreduce(inputs)
        finally:
            job.close()
    assert_exact(results, inputs, PARAMETERS.exponent)
    resends = sum(r.stats.protocol["resends_gap"] + r.stats.protocol["resends_timeout"] for r in results)
    assert resends > 0, "losses were recovered by resends"
    assert job.ps.core.stats.partial_sums + job.ps.core.stats.results_repeated > 0, "the PS finished or repeated some sums"


@pytest.mark.parametrize("data_path", DATA_PATHS)
def test_two_jobs_on_the_same_aggregators_collide_and_end_exact(data_path: str) -> None:
    """A pool of 2 aggregators, each job's window 2: both jobs' positions cover the pool, and a
    window that small makes each job many round trips long, so the two overlap and collide
    whatever the threads' start order on a busy machine (with a window of 16 one job could
    end before the other had started)."""
    shared = replace(PARAMETERS, pool_size=2, window=2)
    with UDPRelay(K, shared.pool_size) as relay:
        jobs = [UDPJob(relay, replace(shared, job_id=job_id), 2, data_path=data_path) for job_id in (1, 2)]
        inputs = [tensors(10 + job_id, 2, 4000) for job_id in (1, 2)]
        try:
            with ThreadPoolExecutor(2) as pool:
                results = list(pool.map(lambda pair: pair[0].allreduce(pair[1]), zip(jobs, inputs)))
        finally:
            for job in jobs:
                job.close()
    for job_results, job_inputs in zip(results, inputs):
        assert_exact(job_results, job_inputs, shared.exponent)
    assert sum(job.ps.core.stats.collided_sequences for job in jobs) > 0, "the jobs met in the pool"


@pytest.mark.parametrize("data_path", DATA_PATHS)
def test_hostile_datagrams_are_counted_and_dropped_at_both_ends(data_path: str) -> None:
    """From the switch's own address (past a worker's kernel filter): a datagram too short, one
    too long, a result of another job, and a packet that is not a result; at the PS: the same
    sizes, another job's result, and a part with a bit beyond the job's workers. The job still
    ends exact. (A well-formed part of the job itself sent straight to the PS would count: the
    PS trusts what reaches it, because on the network only the switch, which checks every
    sender, reaches it on ATP's ports.)"""
    with UDPRelay(K, PARAMETERS.pool_size) as relay:
        job = UDPJob(relay, PARAMETERS, 2, data_path=data_path)
        size = payload_bytes(K)
        other_job = encode_payload(ATPHeader(3, 2, params.FLAG_ACK, 9, 1, 0, params.NO_INDEX), np.zeros(K, np.int32))
        not_a_result = encode_payload(ATPHeader(1, 2, 0, PARAMETERS.job_id, 1, 0, params.NO_INDEX), np.zeros(K, np.int32))
        beyond_the_job = encode_payload(ATPHeader(1 << 5, 2, 0, PARAMETERS.job_id, 1, 0, params.NO_INDEX), np.zeros(K, np.int32))
        malformed = [b"\x00" * 7, b"\xff" * (size + 1)]
        try:
            for payload in [*malformed, other_job, not_a_result]:
                for client in job.clients:
                    relay.switch_face.sendto(payload, client.address)
            for payload in [*malformed, other_job, beyond_the_job]:
                relay.ps_face.sendto(payload, job.ps.address)
            time.sleep(0.2)
            inputs = tensors(6, 2, 500)
            results = job.allreduce(inputs)
        finally:
            job.close()
    assert_exact(results, inputs, PARAMETERS.exponent)
    for result in results:
        assert (result.stats.protocol["malformed"], result.stats.protocol["ignored"]) == (2, 2)
        assert result.stats.rejected_results == 4
    assert (job.ps.stats.malformed, job.ps.core.stats.ignored) == (2, 2)


def test_a_value_beyond_the_jobs_bound_is_refused_before_sending() -> None:
    with UDPRelay(K, PARAMETERS.pool_size) as relay:
        job = UDPJob(relay, PARAMETERS, 2)
        try:
            with pytest.raises(ValueError, match=r"element 3 .*\|x\| > 2\^1"):
                job.clients[0].allreduce(np.array([0, 0, 0, 2.5], dtype=np.float32))
        finally:
            job.close()
    assert relay.frames == 0


def test_the_parameter_server_process_serves_until_sigterm_and_writes_its_stats(tmp_path: Path) -> None:
    """``python -m hosts.atp.server``, ATP's server entry point, as a network starts it: its
    counts written once it serves, when asked (SIGUSR1) while it serves on, and when it stops."""
    n, parameters = 2, replace(PARAMETERS, job_id=5)
    with UDPRelay(K, parameters.pool_size, net=78, switch_face_address=(job_address(78, 0, 254), params.SWITCH_UDP_PORT)) as relay:
        ps_ipv4 = job_address(78, parameters.job_id, PS_HOST)
        spec = WorkerSpec(method="atp", n_workers=n, switch_ipv4=relay.switch_address[0], link_mbps=None, protocol=parameters,
                          peers=(), job_timeout_s=30.0, connect_timeout_s=5.0, servers=(ps_ipv4,))
        spec_path = spec.write(tmp_path / "atp.json")
        assert WorkerSpec.read(spec_path).servers == (ps_ipv4,)
        stats_path = tmp_path / "ps.json"
        server = subprocess.Popen([sys.executable, "-m", "hosts.atp.server", str(spec_path), "--stats", str(stats_path), "--bind", ps_ipv4],
                                  cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
        try:
            wait_bound(ps_ipv4, params.PS_UDP_PORT, server)
            clients = [ATPClient(rank, n, parameters, relay.ps_address, relay.switch_address,
                                 bind_ipv4=job_address(78, parameters.job_id, rank + 1), bind_port=0) for rank in range(n)]
            relay.add_job(RelayJob(parameters.job_id, [c.address for c in clients], (ps_ipv4, params.PS_UDP_PORT)))
            inputs = tensors(7, n, 640)
            with ThreadPoolExecutor(n) as pool:
                results = list(pool.map(lambda pair: pair[0].allreduce(pair[1]), zip(clients, inputs)))
            for client in clients:
                client.close()
            relay.wait_quiet()  # resends still in the relay's buffers reach the PS first: they are the job's
            stats_path.unlink()
            server.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 10
            while not stats_path.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            asked = json.loads(stats_path.read_text())
            assert server.poll() is None, "asked for its counts, it serves on"
        finally:
            server.send_signal(signal.SIGTERM)
            _, stderr = server.communicate(timeout=10)
    assert server.returncode == 0, stderr
    assert_exact(results, inputs, parameters.exponent)
    stats = json.loads(stats_path.read_text())
    assert stats == asked  # nothing came after the job
    assert stats["sequences_from_switch"] + stats["sequences_from_parts"] == 640 // K and stats["results_sent"] >= 640 // K


def test_the_ps_counts_under_the_same_names_on_both_clocks() -> None:
    """The emulated PS's counts (what hosts/server.py writes for the runner) and the simulated
    clock's (``ServerHostCore.stats``) are protocol_counters.csv's server rows: the same names."""
    spec = WorkerSpec(method="atp", n_workers=2, switch_ipv4="127.0.0.1", link_mbps=None, protocol=PARAMETERS, peers=(),
                      job_timeout_s=30.0, connect_timeout_s=5.0, servers=("127.0.0.1",))
    station = SimpleNamespace(mac="02:00:00:00:00:01", ipv4="127.0.0.1")
    emulated = parameter_server(spec, 0, bind_ipv4="127.0.0.1")
    try:
        assert list(emulated.counts()) == list(ServerHostCore(spec, 0, station, station).stats())
        assert set(emulated.counts()) >= {"full_sums", "partial_sums", "collided_sequences", "results_sent", "malformed"}
    finally:
        emulated.close()


def test_the_schema_takes_atps_own_section_and_the_spec_carries_its_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    """``methods: [switchml, atp, ring, ps]`` loads on a target that runs ATP (the embedded one)
    and is refused, naming ATP, on one that does not (the embedded one, told it runs SwitchML only)."""
    from experiments.config import CONFIG_DIR, load_experiment
    from experiments.harness import job_parameters
    from base.yamlschema import ConfigError
    from switches import targets
    embedded = targets.REGISTRY["embedded"]
    assert "atp" in embedded.protocols
    with monkeypatch.context() as only_switchml:
        only_switchml.setitem(targets.REGISTRY, "embedded", replace(embedded, protocols=frozenset({"switchml"})))
        with pytest.raises(ConfigError, match=r"no data plane for ATP"):
            load_experiment(CONFIG_DIR / "8workers.yaml", ["methods=[switchml,atp,ring,ps]", "switch.target=embedded"])
    point = load_experiment(CONFIG_DIR / "8workers.yaml", ["methods=[switchml,atp,ring,ps]", "switch.target=embedded",
                                                          "protocol.atp.window=32", "protocol.atp.congestion_control=false"]).points[0]
    section = job_parameters(point, "atp")
    assert ATPParameters.read(section) == replace(ATPParameters.from_config(point.protocol, point.data_path.name), window=32, congestion_control=False)
    assert section["window"] == 32 and "timeout_ms" not in section, "ATP's own keys, none of SwitchML's"
    assert job_parameters(point, "switchml")["timeout_ms"] == 20.0, "SwitchML's parameters unchanged"



def test_preparing_a_network_frees_every_aggregator_and_sets_the_ecn_threshold() -> None:
    """ATP's ``reset_switch`` through ``Method.prepare``, on the embedded pipeline's control plane."""
    from types import SimpleNamespace
    from switches.atp.programming import AGGREGATOR_REGISTERS, ECN_THRESHOLD
    from switches.embedded.atp.pipeline import ATPPipeline
    from switches.embedded.control_server import pipeline_handlers
    from switches.remote_control import InProcessControl
    control = InProcessControl(pipeline_handlers(ATPPipeline(K, 16), lambda: {}))
    for register in AGGREGATOR_REGISTERS:
        control.register_write(register, 3, 1)  # a job killed mid-sum left aggregator 3 held
    section = config_section(replace(PARAMETERS, ecn_threshold=5))
    methods.by_name("atp").prepare(SimpleNamespace(aggregating_controls=[control]), section)
    assert all(control.register_read(register) == [0] * 16 for register in AGGREGATOR_REGISTERS)
    assert control.register_read(ECN_THRESHOLD, 0) == 5


def test_the_resend_timeout_covers_a_window_on_a_slow_link() -> None:
    from hosts.atp.job import resend_floor
    from protocol.atp.packet import frame_bytes
    assert resend_floor(PARAMETERS, None) == PARAMETERS
    assert resend_floor(PARAMETERS, 10_000.0) == PARAMETERS, "a fast link leaves the configured floor"
    slow = resend_floor(PARAMETERS, 1.0)
    assert slow.resend_timeout_ms == pytest.approx(2 * PARAMETERS.window * 8 * frame_bytes(K) / 1e3)


def test_two_jobs_statistics_add_counts_and_keep_the_later_window() -> None:
    """A DDP step's buckets are added (hosts/stats.py): ATP's counts add, its last window is the later job's."""
    from hosts.stats import JobStats, added
    first = JobStats(protocol={"resends_gap": 1, "cwnd_last": 4})
    later = JobStats(protocol={"resends_gap": 2, "collisions_adopted": 1, "cwnd_last": 8})
    assert added(first, later).protocol == {"collisions_adopted": 1, "cwnd_last": 8, "resends_gap": 3}


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs unshare and root for a network namespace")
def test_a_job_from_the_spec_on_atps_own_ports_in_a_namespace(tmp_path: Path) -> None:
    """The worker class ATP's record names, built from a spec by hosts.allreduce.build, and the
    PS process, each on its fixed port (tests/atp_netns_job.py, in a namespace of its own)."""
    parameters = replace(PARAMETERS, job_id=3)
    spec = WorkerSpec(method="atp", n_workers=1, switch_ipv4="127.0.0.254", link_mbps=None, protocol=parameters, peers=(),
                      job_timeout_s=30.0, connect_timeout_s=5.0, servers=("127.0.0.2",))
    spec_path, out = spec.write(tmp_path / "atp.json"), tmp_path / "out.json"
    command = f"ip link set lo up && exec {sys.executable} -m tests.atp_netns_job {spec_path} {out}"
    done = subprocess.run(["unshare", "-n", "sh", "-c", command], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    outcome = json.loads(out.read_text())
    assert outcome["exact"] and outcome["server_status"] == 0
    ps = outcome["ps"]
    assert ps["sequences_from_switch"] + ps["sequences_from_parts"] == -(-1000 // K) <= outcome["packets_sent"]
