"""Conformance of the ``atp`` torch.distributed backend (hosts/torch_backend.py over ATP's
client, methods/atp.py's ``client``: hosts/atp/ddp_client.py) for the calls it claims,
without Mininet: three ranks on loopback, each one ``ATPClient`` for its whole job, the embedded ATP pipeline relaying
between them (tests/atp_relay.py) and the job's parameter server a process of its own
(``python -m hosts.atp.server``, as a network starts it), serving every all-reduce.

What the ranks report for the parent to check against ATP's exact sums
(protocol/atp/quantize.py's ``expected_sum``: the job-wide scale): float32 and int32 SUM
through the switch, several in flight; the calls SwitchML's backend test hands to Gloo
(float64, float16, bfloat16, AVG, MAX, broadcast, all_gather, barrier), each counted; elements the job's scale flushed to 0, counted; DDP with no hook
on it, several buckets a step, its parameters the same on every rank and every bucket's sum
exact; and an inf on one rank and a value beyond the job's bound on another giving every rank
Gloo's IEEE sum at the same call (the ranks' refusal count), the next sum exact again.

The backend's test needs the optional torch extra (skipped where it is absent, a failure
where SWITCHML_REQUIRE_TORCH=1, .ci/run); the refusal count's test beside it needs none.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import signal
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from protocol.atp import params
from protocol.atp.job import ATPParameters
from protocol.atp.quantize import expected_sum
from protocol.params import REPO_ROOT
from protocol.worker_spec import WorkerSpec
from tests.atp_relay import PS_HOST, RelayJob, UDPRelay, job_address, wait_bound
from tests.conftest import ON_LOOPBACK_GROUP, require_torch
from tests.test_torch_backend import FALLBACKS, SIZES, ddp_steps, float_input, floats_in_flight, gloo_calls
from tests.test_torch_hook import collect

pytestmark = ON_LOOPBACK_GROUP  # loopback only: beside the network tests (-n)

N = 3
K = 32
NET = 79
"""The loopback addresses of this test's hosts: 127.79.<job>.<host> (tests/atp_relay.py)."""
PARAMETERS = ATPParameters(k=K, pool_size=64, job_id=3, window=16, exponent=8, resend_timeout_ms=20.0, congestion_control=True,
                           ecn_threshold=params.DEFAULT_ECN_THRESHOLD)
"""The DDP configs' exponent (methods/atp.py: |x| <= 2^8); a resend timeout above the spawned ranks' scheduling on two cores."""
TINY = np.float32(1e-9)
"""Below half a unit of the job's scale (2^8 / floor(INT32_MAX / 3) ~ 3.6e-7): flushed to 0."""
REFUSED = {0: (3, np.inf), 1: (5, 300.0)}
"""rank -> (index, value) its refused tensor holds: an inf, and a value beyond 2^8."""


def int_input(rank: int) -> np.ndarray:
    return (np.arange(50, dtype=np.int64) * (rank + 1) * 2**29 - 7).astype(np.int32)  # wraps: the sum is modulo 2^32


def tiny_input(rank: int) -> np.ndarray:
    return np.array([TINY, 0.5, 0.0, -TINY * (rank + 1), 2.0], dtype=np.float32)


def refused_input(rank: int) -> np.ndarray:
    tensor = float_input(rank, 1)
    if rank in REFUSED:
        index, value = REFUSED[rank]
        tensor[index] = value
    return tensor


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def atp_rank(rank: int, ps: tuple[str, int], switch: tuple[str, int], store_port: int, queue: mp.Queue) -> None:
    """Every claimed call once, a few DDP steps, then a tensor beyond the bound on rank 0."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from hosts.atp.client import ATPClient
    from hosts.atp.ddp_client import DDPClient
    from hosts.torch_backend import GROUPS, close_groups, fallback_counts, register

    def client(group_rank: int, size: int) -> DDPClient:
        return DDPClient(ATPClient(group_rank, size, PARAMETERS, ps, switch, bind_ipv4=job_address(NET, PARAMETERS.job_id, group_rank + 1),
                                   bind_port=params.WORKER_UDP_PORT, job_deadline_s=30.0))

    register(client)
    dist.init_process_group("atp", init_method=f"tcp://127.0.0.1:{store_port}", rank=rank, world_size=N, timeout=timedelta(seconds=60))
    try:
        report: dict = {"backend": dist.get_backend()}
        report["floats"] = floats_in_flight(rank)  # tensors longer than the window and shorter than a packet
        ints = torch.from_numpy(int_input(rank))
        dist.all_reduce(ints)
        report["ints"] = ints.numpy().copy()
        flushed_before = GROUPS[0].records.flushed
        tiny = torch.from_numpy(tiny_input(rank))
        dist.all_reduce(tiny)
        report["tiny"], report["flushed"] = tiny.numpy().copy(), GROUPS[0].records.flushed - flushed_before

        report["fallbacks"] = gloo_calls(rank)

        report |= ddp_steps(rank)
        report["packets"] = GROUPS[0].records.stats.packets_sent

        refused, after = torch.from_numpy(refused_input(rank)), torch.from_numpy(float_input(rank, 2))
        works = [dist.all_reduce(refused, async_op=True), dist.all_reduce(after, async_op=True)]
        for work in reversed(works):
            work.wait()
        report["refused"], report["after"] = refused.numpy().copy(), after.numpy().copy()
        report["unsummable"] = dict(fallback_counts(GROUPS))
        queue.put((rank, report))
    finally:
        dist.destroy_process_group()
        close_groups()


def test_every_rank_learns_of_a_refused_tensor_at_the_same_call_and_the_job_goes_on() -> None:
    """The refusal count without torch (hosts/atp/ddp_client.py): an inf on rank 0 and a value
    beyond 2^8 on rank 1 make every rank raise RefusedTensor naming two ranks, after a complete
    job; the sums before and after are exact, int32 carries no count, and flushed elements
    are counted."""
    from hosts.atp.ddp_client import DDPClient, RefusedTensor
    from tests.test_atp_udp import UDPJob

    def on_every_rank(inputs: list[np.ndarray]) -> list:
        def one(pair):
            client, tensor = pair
            try:
                return client.allreduce(tensor)
            except RefusedTensor as refused:
                return refused
        with ThreadPoolExecutor(N) as pool:
            return list(pool.map(one, zip(clients, inputs)))

    with UDPRelay(K, PARAMETERS.pool_size, net=NET + 1) as relay:
        job = UDPJob(relay, PARAMETERS, N)
        clients = [DDPClient(client) for client in job.clients]
        try:
            before = on_every_rank([float_input(rank, 0) for rank in range(N)])
            refused = on_every_rank([refused_input(rank) for rank in range(N)])
            ints = on_every_rank([int_input(rank) for rank in range(N)])
            after = on_every_rank([tiny_input(rank) for rank in range(N)])
        finally:
            job.close()
    for results, inputs in ((before, [float_input(r, 0) for r in range(N)]), (after, [tiny_input(r) for r in range(N)])):
        want = expected_sum(inputs, N, PARAMETERS.exponent)
        assert all(np.array_equal(r.int_sum, want.int_sum) and np.array_equal(r.values, want.values) for r in results)
    assert all(isinstance(r, RefusedTensor) and r.ranks == 2 and r.stats.packets_sent > 0 for r in refused), refused
    assert all(np.array_equal(r.int_sum, expected_sum([int_input(x) for x in range(N)], N, PARAMETERS.exponent).int_sum) for r in ints)
    assert [client.flushed(tiny_input(rank), after[rank]) for rank, client in enumerate(clients)] == [2] * N


@pytest.mark.torch
def test_the_atp_backend_sums_on_the_switch_with_its_ps_and_falls_back_to_gloo_for_the_rest(tmp_path: Path) -> None:
    require_torch()
    ps_ipv4 = job_address(NET, PARAMETERS.job_id, PS_HOST)
    context = mp.get_context("spawn")
    queue = context.Queue()
    with UDPRelay(K, PARAMETERS.pool_size, net=NET, switch_face_address=(job_address(NET, 0, 254), params.SWITCH_UDP_PORT)) as relay:
        spec = WorkerSpec(method="atp", n_workers=N, switch_ipv4=relay.switch_address[0], link_mbps=None, protocol=PARAMETERS,
                          peers=(), job_timeout_s=30.0, connect_timeout_s=5.0, servers=(ps_ipv4,))
        stats_path = tmp_path / "ps.json"
        server = subprocess.Popen([sys.executable, "-m", "hosts.atp.server", str(spec.write(tmp_path / "atp.json")), "--stats", str(stats_path),
                                   "--bind", ps_ipv4], cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
        procs = []
        try:
            wait_bound(ps_ipv4, params.PS_UDP_PORT, server)
            relay.add_job(RelayJob(PARAMETERS.job_id, [(job_address(NET, PARAMETERS.job_id, rank + 1), params.WORKER_UDP_PORT)
                                                      for rank in range(N)], (ps_ipv4, params.PS_UDP_PORT)))
            store_port = free_port()
            procs = [context.Process(target=atp_rank, args=(rank, relay.ps_address, relay.switch_address, store_port, queue))
                     for rank in range(N)]
            for proc in procs:
                proc.start()
            reports = collect(procs, queue, timeout_s=240.0)
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.kill()
            server.send_signal(signal.SIGTERM)
            _, stderr = server.communicate(timeout=10)
    assert server.returncode == 0, stderr

    assert {reports[rank]["backend"] for rank in range(N)} == {"atp"}
    for index in range(len(SIZES)):
        want = expected_sum([float_input(rank, index) for rank in range(N)], N, PARAMETERS.exponent)
        for rank in range(N):
            assert np.array_equal(reports[rank]["floats"][index], want.values), f"tensor {index} on rank {rank}"
    want_ints = expected_sum([int_input(rank) for rank in range(N)], N, PARAMETERS.exponent).int_sum
    want_tiny = expected_sum([tiny_input(rank) for rank in range(N)], N, PARAMETERS.exponent).values
    for rank in range(N):
        assert np.array_equal(reports[rank]["ints"], want_ints)
        assert np.array_equal(reports[rank]["tiny"], want_tiny) and reports[rank]["tiny"][[0, 3]].tolist() == [0.0, 0.0]
        assert reports[rank]["flushed"] == 2, "TINY and -TINY * (rank + 1) flushed to 0 at the job's scale"
        assert reports[rank]["fallbacks"] == FALLBACKS, reports[rank]["fallbacks"]
        assert np.array_equal(reports[rank]["parameters"], reports[0]["parameters"]), "DDP's ranks diverged"
        assert reports[rank]["packets"] > 0
        ieee = np.sum(np.stack([refused_input(r) for r in range(N)]).astype(np.float64), axis=0).astype(np.float32)
        assert np.isposinf(ieee[3]) and ieee[5] > 256
        np.testing.assert_allclose(reports[rank]["refused"], ieee, rtol=1e-6, atol=1e-6)  # Gloo's IEEE sum, the inf included
        assert np.array_equal(reports[rank]["refused"], reports[0]["refused"]), "every rank the same sum"
        assert np.array_equal(reports[rank]["after"], expected_sum([float_input(r, 2) for r in range(N)], N, PARAMETERS.exponent).values)
        assert reports[rank]["unsummable"]["allreduce torch.float32 SUM the switch cannot carry (Gloo's IEEE sum)"] == 1
    assert reports[0]["ddp_calls"] > 3 and len({reports[rank]["ddp_calls"] for rank in range(N)}) == 1
    kept = [reports[rank]["kept"] for rank in range(N)]
    assert len({len(k) for k in kept}) == 1 and len(kept[0]) >= reports[0]["ddp_calls"]
    for index in range(len(kept[0])):
        want = expected_sum([kept[rank][index][0] for rank in range(N)], N, PARAMETERS.exponent)  # gradient buckets and DDP's int32 counts
        for rank in range(N):
            assert np.array_equal(kept[rank][index][1], want.int_sum) and np.array_equal(kept[rank][index][2], want.values), (index, rank)
    core = json.loads(stats_path.read_text())
    assert core["sequences_from_switch"] + core["sequences_from_parts"] > 0, "the one PS served the whole job"
