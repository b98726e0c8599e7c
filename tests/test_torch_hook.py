"""The DDP communication hook (hosts/torch_hook.py) without Mininet: three DDP ranks on
loopback, each hook's SwitchMLClient talking to the fake switch of test_switchml_client.

Needs the optional torch extra: skipped where it is absent, a failure where
SWITCHML_REQUIRE_TORCH=1 (.ci/run).
"""

from __future__ import annotations

import multiprocessing as mp
import queue as queues
import time

import numpy as np
import pytest

from tests.conftest import ON_LOOPBACK_GROUP, require_torch
from tests.test_switchml_client import JOB, LOSSLESS, FakeSwitch
from protocol.quantize import expected_sum
from workloads.training import TrainingConfig, load_dataset, minibatch

pytestmark = [pytest.mark.torch, ON_LOOPBACK_GROUP]  # loopback only: beside the network tests (-n)

N = 3
K = 32
POOL = 8
STEPS = 3
BIND_PORT = 48731
"""Rank r's client binds 127.0.0.1:BIND_PORT + r, so the fake switch knows its ranks before they start."""
CONFIG = TrainingConfig(dataset="digits", hidden_units=16, batch_size=8, learning_rate=0.5, steps=STEPS,
                        test_fraction=0.2, seed=5)


def hooked_rank(rank: int, switch_port: int, store_port: int, queue: mp.Queue) -> None:
    """STEPS DDP steps with the SwitchML hook; reports per step the buckets and the parameters."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from hosts.switchml import SwitchMLClient
    from hosts.torch_backend import SwitchQueue
    from hosts.torch_hook import SwitchHookState, switch_allreduce
    from workloads.torch_cnn import batch_loss, build_model, flat_parameters

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{store_port}", rank=rank, world_size=N,
                            timeout=timedelta(seconds=60))
    try:
        data = load_dataset(CONFIG)
        model = build_model(CONFIG.hidden_units, CONFIG.seed + rank)  # differing starts: DDP broadcasts rank 0's
        ddp = DistributedDataParallel(model)
        client = SwitchMLClient(rank, N, JOB, "127.0.0.1", switch_port=switch_port, bind_ipv4="127.0.0.1",
                                bind_port=BIND_PORT + rank, k=K, pool_size=POOL, retransmit=LOSSLESS, job_deadline_s=20)
        switch = SwitchQueue(client)
        state = SwitchHookState(switch, N)
        ddp.register_comm_hook(state, switch_allreduce)
        optimizer = torch.optim.SGD(model.parameters(), lr=CONFIG.learning_rate)
        reports = [("start", flat_parameters(model))]
        for step in range(1, STEPS + 1):
            optimizer.zero_grad()
            batch_loss(ddp, *minibatch(CONFIG, data, rank, N, step)).backward()
            grads = np.concatenate([p.grad.reshape(-1).numpy() for p in model.parameters()])
            optimizer.step()
            buckets = [(b.index, b.inputs, b.int_sum, b.values, b.stats.packets_sent) for b in state.take()]
            reports.append((buckets, grads, flat_parameters(model)))
        switch.close()
        queue.put((rank, reports))
    finally:
        dist.destroy_process_group()


def collect(procs: list, queue: mp.Queue, timeout_s: float = 180.0) -> dict[int, list]:
    """Every rank's report; fails at once when a rank exits without one."""
    reports: dict[int, list] = {}
    deadline = time.monotonic() + timeout_s
    while len(reports) < len(procs):
        try:
            rank, report = queue.get(timeout=1)
            reports[rank] = report
        except queues.Empty:
            failed = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            assert not failed and time.monotonic() < deadline, f"ranks failed ({failed}) or timed out"
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    return reports


def run_ranks(target, n: int, k: int, bind_port: int, timeout_s: float = 180.0) -> dict[int, list]:
    """Every rank's report of ``target(rank, switch_port, store_port, queue)`` in ``n`` spawned
    processes over one fake switch: rank r's client binds 127.0.0.1:bind_port + r, and the
    process group's store listens at bind_port + 10. Ranks still running when it fails (a
    hang the test caught) are killed, so the failure does not hold up the session."""
    context = mp.get_context("spawn")
    queue = context.Queue()
    with FakeSwitch(n, k) as switch:
        switch.ranks = {("127.0.0.1", bind_port + rank): rank for rank in range(n)}
        procs = [context.Process(target=target, args=(rank, switch.port, bind_port + 10, queue)) for rank in range(n)]
        for proc in procs:
            proc.start()
        try:
            return collect(procs, queue, timeout_s)
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.kill()


def test_ddp_hook_reduces_every_bucket_through_the_switch_and_averages() -> None:
    """Every step: the buckets in index order, each switch sum the exact integer sum of the
    ranks' quantized inputs, DDP's gradient that sum over N, and every rank's parameters equal."""
    require_torch()
    reports = run_ranks(hooked_rank, N, K, BIND_PORT)
    for rank in range(N):
        assert np.array_equal(reports[rank][0][1], reports[0][0][1]), "DDP did not start every rank from rank 0's parameters"
    for step in range(1, STEPS + 1):
        per_rank = [reports[rank][step] for rank in range(N)]
        buckets0 = per_rank[0][0]
        assert [b[0] for b in buckets0] == list(range(len(buckets0))) and buckets0
        for index in range(len(buckets0)):
            inputs = [per_rank[rank][0][index][1] for rank in range(N)]
            want = expected_sum(inputs, K, N)
            for rank in range(N):
                _, _, int_sum, values, packets = per_rank[rank][0][index]
                assert np.array_equal(int_sum, want.int_sum) and np.array_equal(values, want.values)
                assert packets > 0
        averaged = np.concatenate([b[3] for b in buckets0]) / np.float32(N)
        for rank in range(N):
            # the bucket is a flat view of the gradients (one bucket here: in reverse parameter order)
            assert np.array_equal(np.sort(per_rank[rank][1]), np.sort(averaged))
            assert np.array_equal(per_rank[rank][2], per_rank[0][2])


OVERLAP_N = 2
OVERLAP_LAYERS = 4
OVERLAP_WIDTH = 128
"""Each Linear(128, 128) is 16,512 floats, ~0.07 MB: its own bucket with bucket_cap_mb=0.05."""
OVERLAP_COMPUTE_S = 0.15
"""Each layer's backward sleeps this long (compute that takes no core: two cores run two
ranks and the fake switch, so real arithmetic would slow the switch it overlaps with)."""
OVERLAP_STEPS = 5


def overlapped_rank(rank: int, switch_port: int, store_port: int, queue: mp.Queue) -> None:
    """Steps with the asynchronous hook and, as the reference, without any all-reduce (no_sync):
    per step its wall time, its compute alone, and its buckets' all-reduce times."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from hosts.switchml import SwitchMLClient
    from hosts.torch_backend import SwitchQueue
    from hosts.torch_hook import SwitchHookState, switch_allreduce

    class SlowBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
            return x.view_as(x)

        @staticmethod
        def backward(ctx: object, grad: torch.Tensor) -> torch.Tensor:
            time.sleep(OVERLAP_COMPUTE_S)
            return grad

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(OVERLAP_WIDTH, OVERLAP_WIDTH) for _ in range(OVERLAP_LAYERS))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(SlowBackward.apply(x))
            return x

    torch.set_num_threads(1)  # two cores, two ranks and the fake switch
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{store_port}", rank=rank, world_size=OVERLAP_N,
                            timeout=timedelta(seconds=60))
    try:
        torch.manual_seed(0)
        ddp = DistributedDataParallel(Net(), bucket_cap_mb=0.05)
        client = SwitchMLClient(rank, OVERLAP_N, JOB, "127.0.0.1", switch_port=switch_port, bind_ipv4="127.0.0.1",
                                bind_port=BIND_PORT + rank, k=K, pool_size=POOL, retransmit=LOSSLESS, job_deadline_s=20)
        switch = SwitchQueue(client)
        state = SwitchHookState(switch, OVERLAP_N)
        ddp.register_comm_hook(state, switch_allreduce)
        x = torch.randn(4, OVERLAP_WIDTH, requires_grad=True)  # its gradient makes the first layer's SlowBackward run too
        steps = []
        for step in range(OVERLAP_STEPS + 1):  # the first step's buckets are DDP's provisional ones
            started = time.perf_counter()
            with ddp.no_sync():
                ddp(x).sum().backward()
            compute_s = time.perf_counter() - started
            started = time.perf_counter()
            ddp(x).sum().backward()
            step_s = time.perf_counter() - started
            buckets = state.take()
            if step:
                steps.append((step_s, compute_s, sum(b.stats.tat_s for b in buckets), len(buckets)))
        switch.close()
        queue.put((rank, steps))
    finally:
        dist.destroy_process_group()


def test_the_hook_overlaps_the_buckets_all_reduce_with_the_backward_pass() -> None:
    """A step takes less than its compute plus its buckets' all-reduce times: the switch sums
    bucket i while the backward pass computes bucket i+1's gradients (a synchronous hook
    would take their sum)."""
    require_torch()
    context = mp.get_context("spawn")
    queue = context.Queue()
    with FakeSwitch(OVERLAP_N, K) as switch:
        switch.ranks = {("127.0.0.1", BIND_PORT + rank): rank for rank in range(OVERLAP_N)}
        procs = [context.Process(target=overlapped_rank, args=(rank, switch.port, BIND_PORT + 11, queue)) for rank in range(OVERLAP_N)]
        for proc in procs:
            proc.start()
        reports = collect(procs, queue)
    for rank in range(OVERLAP_N):
        step_s, compute_s, allreduce_s, buckets = (float(np.median([s[i] for s in reports[rank]])) for i in range(4))
        assert buckets == OVERLAP_LAYERS, "one bucket per layer"
        assert allreduce_s > 0.3 * compute_s, f"too little communication to show an overlap: {allreduce_s:.3f} s"
        assert step_s < 0.9 * (compute_s + allreduce_s), (
            f"rank {rank}: step {step_s:.3f} s, compute {compute_s:.3f} s + all-reduce {allreduce_s:.3f} s: no overlap")
