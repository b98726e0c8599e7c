"""SwitchML end to end: 8 worker processes in network namespaces and the embedded switch.

Each worker is a forked process that creates its SwitchMLClient inside its host's
namespace (base/netns.py) and runs a sequence of all-reduces in lock step with
the others (a barrier before every call). Every result must equal
protocol.quantize.expected_sum bit for bit, first without loss, then with the switch's
drop simulator at 1 % on ingress and 1 % on egress.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import traceback
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

from hosts.switchml import AllReduceResult, RetransmitPolicy, SwitchMLClient
from protocol import params
from protocol.switchml import params as switchml_params
from protocol.switchml.packet import payload_bytes
from protocol.quantize import expected_sum
from switches import standalone
from switches.switchml import programming
from switches.control import SwitchControl
from base.netns import Testbed, in_namespace
from tests.conftest import DEFAULT_TESTED_K, ON_THE_BENCH

pytestmark = [pytest.mark.netns, ON_THE_BENCH, pytest.mark.embedded]  # the embedded switch on a standalone test bed: beside the network tests (-n)

log = logging.getLogger(__name__)

N = 8
JOB = 11
POOL = 32
K = DEFAULT_TESTED_K
"""The case does not depend on k; the lengths below are laid out around it."""
FLOAT_LENGTHS = (1, K - 1, K * POOL + 1, 100_003)
INT_LENGTHS = (K, 40_000)
WORKER_TIMEOUT_S = 240.0
POLICY = RetransmitPolicy(min_s=0.05, backoff_every=8, max_s=1.0, first_s=0.05)
FORK = multiprocessing.get_context("fork")


def make_inputs(seed: int) -> list[list[np.ndarray]]:
    """inputs[job][rank]: float32 spanning six decades, then int32 over the full range."""
    rng = np.random.default_rng(seed)
    jobs = [
        [(rng.standard_normal(n) * 10.0 ** rng.integers(-3, 3, n)).astype(np.float32) for _ in range(N)]
        for n in FLOAT_LENGTHS
    ]
    jobs += [[rng.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32) for _ in range(N)] for n in INT_LENGTHS]
    return jobs


def worker(netns: str, rank: int, ipv4: str, tensors: list[np.ndarray], barrier: Barrier, conn: Connection) -> None:
    """Runs in a forked child: one rank, every job in order, results back through ``conn``."""
    try:
        with in_namespace(netns):
            client = SwitchMLClient(rank, N, JOB, params.SWITCH_IPV4, bind_ipv4=ipv4, k=K, pool_size=POOL,
                                    retransmit=POLICY, job_deadline_s=WORKER_TIMEOUT_S / 2)
        results = []
        with client:
            for tensor in tensors:
                barrier.wait(WORKER_TIMEOUT_S)
                results.append(client.allreduce(tensor))
        conn.send(("ok", results))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()
        os._exit(0)


def run_workers(bed: Testbed, jobs: list[list[np.ndarray]]) -> list[list[AllReduceResult]]:
    """results[job][rank], from N processes started together."""
    barrier = FORK.Barrier(N)
    pipes, procs = [], []
    for host in bed.hosts:
        receiver, sender = FORK.Pipe(duplex=False)
        tensors = [job[host.index] for job in jobs]
        proc = FORK.Process(target=worker, args=(host.netns, host.index, host.ipv4, tensors, barrier, sender))
        proc.start()
        sender.close()
        pipes.append(receiver)
        procs.append(proc)
    try:
        per_rank = []
        for rank, receiver in enumerate(pipes):
            if not receiver.poll(WORKER_TIMEOUT_S):
                raise TimeoutError(f"worker {rank} sent nothing within {WORKER_TIMEOUT_S} s")
            status, payload = receiver.recv()
            if status != "ok":
                raise AssertionError(f"worker {rank} failed:\n{payload}")
            per_rank.append(payload)
    finally:
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()
    return [[per_rank[rank][j] for rank in range(N)] for j in range(len(jobs))]


def packets_per_worker(length: int, dtype: np.dtype) -> int:
    chunks = -(-length // K)
    return chunks + (min(POOL, chunks) if dtype == np.float32 else 0)


def check_and_summarise(jobs: list[list[np.ndarray]], results: list[list[AllReduceResult]]) -> list[dict]:
    """Assert every rank got the exact expected sum; one summary row per job."""
    rows = []
    for inputs, outcome in zip(jobs, results):
        expected = expected_sum(inputs, K, N)
        for rank, result in enumerate(outcome):
            np.testing.assert_array_equal(result.int_sum, expected.int_sum, err_msg=f"rank {rank}, {len(inputs[0])} elements")
            np.testing.assert_array_equal(result.values, expected.values)
            assert result.stats.packets_sent == packets_per_worker(len(inputs[0]), inputs[0].dtype) + result.stats.retransmissions
            assert result.stats.bytes_sent == result.stats.packets_sent * payload_bytes(K)
        stats = [r.stats for r in outcome]
        rows.append({
            "dtype": str(inputs[0].dtype), "elements": len(inputs[0]),
            "tat_s": max(s.tat_s for s in stats),
            "packets_sent": sum(s.packets_sent for s in stats),
            "packets_received": sum(s.packets_received for s in stats),
            "retransmissions": sum(s.retransmissions for s in stats),
            "duplicates": sum(s.duplicates for s in stats),
        })
    return rows


@pytest.fixture(scope="module")
def switch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Testbed, SwitchControl]]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    from switches.embedded.launcher import embedded_switch

    log_dir = tmp_path_factory.mktemp("switchml-e2e")
    with standalone.testbed(N) as bed, embedded_switch(bed.switch_ports, log_dir, command_log=log_dir / "commands.txt", k=K,
                                                            max_pool_size=switchml_params.MAX_POOL_SIZE, seed=3) as control:
        programming.program_forwarding(control, list(bed.switch_ports), {})
        workers = [programming.WorkerPort(h.index, h.switch_port, h.mac, h.ipv4) for h in bed.hosts]
        programming.program_aggregation(control, programming.JobProgram(JOB, workers))
        programming.program_switch_address(control, params.SWITCH_MAC, params.SWITCH_IPV4)  # the workers resolve it by ARP
        yield bed, control


def run_phase(bed: Testbed, control: SwitchControl, loss: float, seed: int, tmp_path: Path) -> tuple[list[dict], dict[str, int]]:
    """Fresh clients (shadow sets at 0), so the switch's aggregation state is reset first."""
    programming.reset_aggregation_state(control, K)
    programming.reset_event_counters(control)
    programming.set_drop_probability(control, loss, loss)
    jobs = make_inputs(seed)
    rows = check_and_summarise(jobs, run_workers(bed, jobs))
    counters = programming.read_event_counters(control)
    # Every slot version completes exactly once, however many packets are lost.
    assert counters["EV_RESULT_MULTICAST"] == sum(packets_per_worker(len(j[0]), j[0].dtype) for j in jobs)
    (tmp_path / f"loss{loss}.json").write_text(json.dumps({"jobs": rows, "switch": counters}, indent=1))
    for row in rows:
        log.info("loss %.2f: %s", loss, row)
    log.info("loss %.2f: switch counters %s", loss, counters)
    return rows, counters


def test_eight_workers_exact_without_loss(switch: tuple[Testbed, SwitchControl], tmp_path: Path) -> None:
    rows, counters = run_phase(*switch, loss=0.0, seed=21, tmp_path=tmp_path)
    assert counters["EV_DROP_SIM_INGRESS"] == counters["EGV_DROP_SIM_EGRESS"] == 0
    assert counters["EV_DROP_UNKNOWN_SENDER"] == counters["EV_DROP_MALFORMED"] == counters["EV_DROP_WRONG_JOB"] == 0


def test_eight_workers_exact_with_one_percent_loss(switch: tuple[Testbed, SwitchControl], tmp_path: Path) -> None:
    rows, counters = run_phase(*switch, loss=0.01, seed=22, tmp_path=tmp_path)
    assert counters["EV_DROP_SIM_INGRESS"] > 0 and counters["EGV_DROP_SIM_EGRESS"] > 0
    retransmissions = sum(row["retransmissions"] for row in rows)
    assert retransmissions > 0
    # Each packet lost on ingress is resent at least once (egress losses may be covered by a retransmission in flight).
    assert retransmissions >= counters["EV_DROP_SIM_INGRESS"]
