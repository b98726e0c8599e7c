"""The native worker data path against the Python one: the same packets, the same sums.

hosts/switchml/native/worker.c translates WorkerCore and its driver; the Python worker is
the reference. These tests hold the two together on what does not depend on timing: which
packets each worker sends (every slot, shadow set, seq, exponent and element), the integer
sums and exponents it ends with, and that a resend is the identical packet. They run the
same jobs on both, lossless, lossy, with every result duplicated and with results
reordered, and in one job whose workers mix the two. tests/test_switchml_client.py runs
every other client test (stale results, timeouts, bad tensors) on both as well; the
end-to-end test at the bottom runs both on every switch target. Also here: the fallback
where nothing builds the library, and signals during the C loop.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hosts.switchml import SwitchMLClient
from hosts.switchml.native import NativeUnavailable, build, library, resolve
from hosts.switchml import core
from hosts.switchml.core import JobContext
from hosts.switchml.job import AllReduceJob
from hosts.mmsg import BatchSocket
from hosts.switchml.native.job import STRUCTS, NativeJob, NativeRoundTrip, _Job, declare, layout_differences
from hosts.switchml.pool import SlotPool
from protocol.switchml.packet import payload_bytes, payload_dtype
from protocol.params import REPO_ROOT
from protocol.quantize import block_exponents, expected_sum
from tests.conftest import require_target
from tests.experiment_runs import experiment_argv, leftovers
from tests.test_switchml_client import JOB, LOSSLESS, LOSSY, N, POOL, FakeSwitch, make_clients, make_tensors, run_allreduce

K = 4
DATA_PATHS = ("python", "native")


class RecordingSwitch(FakeSwitch):
    """The fake switch of test_switchml_client, which also keeps every update's bytes and
    can reorder its results (each one sent after the next, per destination)."""

    def __init__(self, *args: object, reorder: bool = False, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.reorder = reorder
        self.payloads: dict[tuple[int, int, int, int], set[bytes]] = {}
        """(rank, slot, set, seq) -> the distinct payloads received for it."""
        self._held: dict[tuple[str, int], bytes] = {}

    def _aggregate(self, packet: bytes, addr: tuple[str, int]) -> None:
        before = len(self.updates)
        super()._aggregate(packet, addr)
        self.payloads.setdefault(self.updates[before], set()).add(bytes(packet))

    def _send(self, payload: bytes, addr: tuple[str, int]) -> None:
        if not self.reorder:
            return super()._send(payload, addr)
        held = self._held.pop(addr, None)
        if held is None:
            self._held[addr] = payload
            return
        super()._send(payload, addr)
        super()._send(held, addr)

    def _idle(self) -> None:  # nothing follows a held result: let it go
        for target, held in list(self._held.items()):
            del self._held[target]
            super()._send(held, target)


SCENARIOS = {
    "lossless": ({}, LOSSLESS),
    "loss": ({"drop": 0.05, "seed": 5}, LOSSY),
    "duplicates": ({"duplicate_results": True}, LOSSLESS),
    "reordered": ({"reorder": True}, LOSSLESS),
}


TIES = np.array([1.0, 0.25, 0.75, -0.25], dtype=np.float32)
"""A block whose products x * f fall exactly halfway between two integers (N = 3 workers:
f = floor(INT32_MAX / 3) / 2^0 = 2 * an odd number, so 0.25 f and 0.75 f end in .5): where
rounding half to even and half away from zero differ, which random floats almost never hit."""


def with_ties(tensors: list[np.ndarray]) -> list[np.ndarray]:
    """float32 tensors with the TIES block first (int32 ones as they are)."""
    if tensors[0].dtype != np.float32:
        return tensors
    return [np.concatenate([TIES, t[len(TIES):]]) for t in tensors]


def run_job(data_paths: list[str], scenario: str, tensors: list[np.ndarray]) -> tuple[list, RecordingSwitch]:
    options, policy = SCENARIOS[scenario]
    with RecordingSwitch(N, K, **options) as switch:
        clients = make_clients(switch, data_paths[0], policy, data_paths=data_paths)
        assert [c.data_path.name for c in clients] == data_paths
        results = run_allreduce(clients, tensors)
        for client in clients:
            client.close()
    return results, switch


def check_exact(results: list, tensors: list[np.ndarray]) -> None:
    expected = expected_sum(tensors, K, N)
    for result in results:
        np.testing.assert_array_equal(result.int_sum, expected.int_sum)
        np.testing.assert_array_equal(result.values, expected.values)
        if expected.exponents is not None:
            np.testing.assert_array_equal(result.exponents, expected.exponents)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_both_data_paths_send_the_same_packets_and_end_with_the_same_sums(dtype: type, scenario: str) -> None:
    tensors = with_ties(make_tensors(dtype, 1501, seed=11))
    runs = {path: run_job([path] * N, scenario, tensors) for path in DATA_PATHS}
    for path, (results, switch) in runs.items():
        check_exact(results, tensors)
        # a resend is the identical packet: one payload per (rank, slot, set, seq)
        assert all(len(payloads) == 1 for payloads in switch.payloads.values()), path
    (python, python_switch), (native, native_switch) = runs["python"], runs["native"]
    assert python_switch.payloads == native_switch.payloads  # every packet of every worker, byte for byte
    for p, n in zip(python, native):
        assert p.stats.packets_received > 0 and n.stats.packets_received > 0
        if scenario == "loss":
            assert p.stats.retransmissions > 0 and n.stats.retransmissions > 0
            assert (p.stats.retransmissions, n.stats.retransmissions) == (p.stats.timeouts, n.stats.timeouts)
        else:  # no loss: no timer fires on either, and each sends each packet once
            assert p.stats.retransmissions == n.stats.retransmissions == 0
            assert p.stats.packets_sent == n.stats.packets_sent == p.stats.bytes_sent // payload_bytes(K)
            # every packet's result is taken once (a duplicate of the last may come after the job)
            assert p.stats.packets_received - p.stats.duplicates == n.stats.packets_received - n.stats.duplicates == p.stats.packets_sent
        assert sum(n.stats.timeline) == n.stats.packets_sent


def test_a_job_whose_workers_mix_the_data_paths_is_exact_under_loss() -> None:
    tensors = with_ties(make_tensors(np.float32, 3001, seed=12))
    results, switch = run_job(["native", "python", "native"], "loss", tensors)
    check_exact(results, tensors)
    assert all(len(payloads) == 1 for payloads in switch.payloads.values())


def test_back_to_back_native_jobs_carry_the_round_trip_estimate() -> None:
    """The client's estimator outlives its jobs on the native path too (its samples count on)."""
    tensors = make_tensors(np.int32, 40 * K, seed=13)
    with RecordingSwitch(N, K) as switch:
        clients = make_clients(switch, "native")
        run_allreduce(clients, tensors)
        first = clients[0]._native_rtt.count
        check_exact(run_allreduce(clients, tensors), tensors)
        assert 0 < first < clients[0]._native_rtt.count
        for client in clients:
            client.close()


def test_the_library_and_python_lay_out_the_shared_structs_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """Field by field: two swapped fields of one size keep the struct's size, so only the
    offsets show them (such a mirror is refused at load)."""
    lib = library()
    assert lib.sml_job_size() == ctypes.sizeof(_Job)
    assert lib.sml_rtt_size() == ctypes.sizeof(NativeRoundTrip)
    assert layout_differences(lib) == []
    fields = list(_Job._fields_)
    fields[0], fields[1] = fields[1], fields[0]  # fd and k, both int32
    swapped = type("_Job", (ctypes.Structure,), {"_fields_": fields})
    assert ctypes.sizeof(swapped) == ctypes.sizeof(_Job)
    monkeypatch.setitem(STRUCTS, "sml_job", swapped)
    assert layout_differences(lib)[:2] == ["sml_job.k is at offset 4 in worker.c and at 0 in Python",
                                           "sml_job.fd is at offset 0 in worker.c and at 4 in Python"]
    with pytest.raises(NativeUnavailable, match="lay out the shared structs differently: sml_job.k is at offset 4"):
        declare(lib)


def start_job(data_path: str, io: BatchSocket, pool: SlotPool, tensor: np.ndarray) -> None:
    """A job of ``tensor`` on ``data_path``'s class, built over ``io`` and ``pool`` but not run."""
    ctx = JobContext(rank=0, n_workers=1, job_id=JOB, policy=LOSSLESS, deadline_s=1.0)
    exponents = block_exponents(tensor, pool.k)
    if data_path == "native":
        NativeJob(io, pool, ctx, NativeRoundTrip(), tensor, exponents, 0, 0.0, io._sock.fileno())
    else:
        AllReduceJob(io, select.poll(), pool, ctx, tensor, exponents, 0, 0.0)


@pytest.mark.parametrize("data_path", DATA_PATHS)
def test_both_data_paths_refuse_buffers_a_job_would_overrun(data_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """NativeJob took a batch buffer too small for two pools, and records of another k:
    worker.c then wrote past them (ASan: heap overflows). Both paths refuse them alike, and a
    job with more packets than worker.c's int32 counts (2^31 chunks at k = 1: an 8 GiB
    tensor, which "succeeded" with zeros) is refused too."""
    tensor = np.ones(64 * K, dtype=np.float32)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        pool = SlotPool(POOL, K)
        with pytest.raises(ValueError, match=f"the send buffer holds {POOL} records, a batch may need {2 * POOL}"):
            start_job(data_path, BatchSocket(sock, pool.packets.dtype, POOL), pool, tensor)
        with pytest.raises(ValueError, match=r"records of 269 bytes, the pool's packets \(4 elements\) are 29"):
            start_job(data_path, BatchSocket(sock, payload_dtype(64), 2 * POOL), pool, tensor)
        monkeypatch.setattr(core, "MAX_JOB_PACKETS", 64)
        with pytest.raises(ValueError, match="a tensor of 256 elements takes 68 packets at k = 4, more than the 64 of one all-reduce"):
            start_job(data_path, BatchSocket(sock, pool.packets.dtype, 2 * POOL), pool, tensor)
        start_job(data_path, BatchSocket(sock, pool.packets.dtype, 2 * POOL), pool, tensor[:60 * K])


def test_where_nothing_builds_it_auto_runs_the_python_worker_and_says_why(tmp_path: Path) -> None:
    with pytest.raises(NativeUnavailable, match="could not be run"):
        build("/nonexistent/cc", build_root=tmp_path)
    assert not list(tmp_path.iterdir())  # a failed build leaves nothing behind
    env = {**os.environ, "CC": "/nonexistent/cc"}
    probe = subprocess.run([sys.executable, "-c", "from hosts.switchml.native import resolve; p = resolve('auto'); print(p.name); print(p.reason)"],
                           capture_output=True, text=True, cwd=REPO_ROOT, env=env, check=True)
    name, reason = probe.stdout.splitlines()
    assert name == "python" and "native data path is not available (/nonexistent/cc could not be run" in reason
    dry = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(REPO_ROOT / "configs" / "8workers.yaml"), "--dry-run",
           "--switch", "embedded"]
    shown = subprocess.run(dry, capture_output=True, text=True, cwd=REPO_ROOT, env=env)
    assert shown.returncode == 0, shown.stderr
    assert "SwitchML worker: the Python worker: the native data path is not available" in shown.stdout
    refused = subprocess.run([*dry, "--set", "protocol.data_path=native"], capture_output=True, text=True, cwd=REPO_ROOT, env=env)
    assert refused.returncode == 2
    assert "protocol.data_path: native:" in refused.stderr and "Traceback" not in refused.stderr
    with pytest.raises(ValueError, match="data_path must be one of"):
        resolve("fast")


class Stop(Exception):
    pass


def test_a_signal_during_the_native_loop_runs_its_handler_and_the_job_goes_on() -> None:
    """The C loop returns on a signal; Python runs the handler and resumes it (every piece
    of progress lives in the shared struct). A handler that raises ends the job at once."""
    calls = []
    previous = signal.signal(signal.SIGALRM, lambda *_: calls.append(1))
    tensor = make_tensors(np.float32, 20000, seed=14)[0]
    try:
        with RecordingSwitch(1, K) as switch:
            (client,) = make_clients(switch, "native")
            signal.setitimer(signal.ITIMER_REAL, 0.001, 0.001)
            result = client.allreduce(tensor)
            signal.setitimer(signal.ITIMER_REAL, 0)
            assert calls, "no signal arrived during the job: make it longer"
            np.testing.assert_array_equal(result.int_sum, expected_sum([tensor], K, 1).int_sum)

            def stop(*_: object) -> None:
                raise Stop

            signal.signal(signal.SIGALRM, stop)
            signal.setitimer(signal.ITIMER_REAL, 0.005)
            with pytest.raises(Stop):
                client.allreduce(make_tensors(np.float32, 200000, seed=15)[0])
            client.close()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_the_client_names_the_path_it_runs() -> None:
    with SwitchMLClient(0, 1, JOB, "127.0.0.1", bind_ipv4="127.0.0.1", bind_port=0, k=K, pool_size=POOL,
                        data_path="auto") as client:
        assert client.data_path.name == "native"  # this machine builds it (CI installs the compiler)


# ---- every switch target -------------------------------------------------------------------


@pytest.mark.mininet
@pytest.mark.slow
@pytest.mark.parametrize("target", [pytest.param("embedded"), pytest.param("ebpf", marks=pytest.mark.ebpf),
                                    pytest.param("bmv2", marks=pytest.mark.bmv2)])
def test_both_data_paths_verify_under_loss_on_every_target(tmp_path: Path, target: str) -> None:
    """One sweep, protocol.data_path python then native, 4 workers losing 1 % of packets on
    every link: each point's every result verifies exactly (so both end with the same sums,
    bit for bit), both recover by retransmission, and summary.json says which ran."""
    if os.geteuid() != 0:
        pytest.skip("Mininet tests need root")
    require_target(target)
    out = tmp_path / "run"
    rate = ["topology.link.bw_mbps=1"] if target == "bmv2" else []
    argv = experiment_argv(out, "topology.workers=4", "workload.elements=20000", "repetitions=1", "methods=[switchml]",
                           "topology.link.loss=0.01", "sweep={param: protocol.data_path, values: [python, native]}",
                           *rate, target=target)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True
    assert [p["data_path"] for p in summary["points"]] == ["python", "native"]
    runs = pd.read_csv(out / "runs.csv")
    assert runs["verified"].all() and set(runs["point"]) == {0, 1}
    assert (runs.groupby("point")["retransmissions"].sum() > 0).all(), runs
    assert not leftovers(str(out))
