"""Conformance of the ``switchml`` torch.distributed backend (hosts/torch_backend.py) for
the calls it claims, without Mininet: three ranks on loopback, each one's client talking to
the fake switch of test_switchml_client, the fallback Gloo group on loopback too.

What a rank checks itself (every rank's inputs are known to all: seeded by rank) and what
it reports for the parent to check against the switch's exact sums: float32 and int32 SUM
through the switch, several in flight with async work handles; float64, float16, bfloat16,
AVG, MAX, broadcast, all_gather, all_gather_into_tensor and barrier through Gloo, each
counted as a fallback; and DDP with no hook on it, several buckets a step, its parameters
the same on every rank.

Needs the optional torch extra: skipped where it is absent, a failure where
SWITCHML_REQUIRE_TORCH=1 (.ci/run).
"""

from __future__ import annotations

import multiprocessing as mp

import numpy as np
import pytest

from protocol.quantize import expected_sum
from tests.conftest import ON_LOOPBACK_GROUP, require_torch
from tests.test_switchml_client import JOB, LOSSLESS
from tests.test_torch_hook import collect, run_ranks

pytestmark = [pytest.mark.torch, ON_LOOPBACK_GROUP]  # loopback only: beside the network tests (-n)

N = 3
K = 32
POOL = 8
BIND_PORT = 48761
"""Rank r's client binds 127.0.0.1:BIND_PORT + r, so the fake switch knows its ranks before they start."""
SIZES = (1000, 37, 4096)
"""The float32 tensors all-reduced at once: one longer than the pool, one shorter than a packet."""


def float_input(rank: int, index: int) -> np.ndarray:
    return np.random.default_rng(100 * rank + index).normal(size=SIZES[index]).astype(np.float32)


def int_input(rank: int) -> np.ndarray:
    return np.arange(50, dtype=np.int32) * (rank + 1) - 7


def floats_in_flight(rank: int) -> list[np.ndarray]:
    """This rank's ``float_input`` tensors all-reduced on the default group, all in flight at once: their sums."""
    import torch
    import torch.distributed as dist

    floats = [torch.from_numpy(float_input(rank, i)) for i in range(len(SIZES))]
    works = [dist.all_reduce(t, async_op=True) for t in floats]
    assert all(work.wait() for work in works) and all(work.is_completed() for work in works)
    return [t.numpy().copy() for t in floats]


def ddp_steps(rank: int) -> dict:
    """Three DDP steps with no hook on the default group, several buckets a step: the group's
    all-reduces they made (``ddp_calls``), this rank's ``parameters`` after them, and every
    record the group kept (``kept``: inputs, integer sum, values)."""
    import torch
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from hosts.torch_backend import GROUPS

    torch.manual_seed(rank)  # differing starts: DDP broadcasts rank 0's
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 5))
    ddp = DistributedDataParallel(model, bucket_cap_mb=0.01)  # ~2.6k floats a bucket: several in the first step
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    calls_before = GROUPS[0].records.calls
    generator = torch.Generator().manual_seed(rank)
    for _ in range(3):
        optimizer.zero_grad()
        ddp(torch.randn(8, 20, generator=generator)).sum().backward()
        optimizer.step()
    return {"ddp_calls": GROUPS[0].records.calls - calls_before,
            "parameters": np.concatenate([p.detach().numpy().ravel() for p in model.parameters()]),
            "kept": [(r.inputs, r.int_sum, r.values) for r in GROUPS[0].records.kept()]}


def gloo_calls(rank: int) -> dict[str, int]:
    """Every call the backend hands to Gloo, once, each checked here (the sums exact in every
    dtype): the world group's fallback counts after them."""
    import torch
    import torch.distributed as dist

    from hosts.torch_backend import GROUPS

    small = [1.0 + rank, 2.0 * rank, -3.0]  # sums exact in every dtype
    for dtype in (torch.float64, torch.float16, torch.bfloat16):
        t = torch.tensor(small, dtype=dtype)
        dist.all_reduce(t)
        assert t.tolist() == [sum(1.0 + r for r in range(N)), sum(2.0 * r for r in range(N)), -3.0 * N], dtype
    t = torch.tensor(small)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert t.tolist() == [float(N), 2.0 * (N - 1), -3.0]
    t = torch.tensor([3.0 * rank])
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    assert t.tolist() == [3.0 * (N - 1) / 2]
    t = torch.full((4,), float(rank))
    dist.broadcast(t, src=1)
    assert t.tolist() == [1.0] * 4
    gathered = [torch.zeros(2) for _ in range(N)]
    dist.all_gather(gathered, torch.full((2,), float(rank)))
    assert [g.tolist() for g in gathered] == [[float(r)] * 2 for r in range(N)]
    flat = torch.zeros(2 * N)
    dist.all_gather_into_tensor(flat, torch.full((2,), float(rank)))
    assert flat.tolist() == [float(r) for r in range(N) for _ in range(2)]
    dist.barrier()
    return dict(GROUPS[0].fallbacks)


FALLBACKS = {"allreduce torch.float64 SUM": 1, "allreduce torch.float16 SUM": 1, "allreduce torch.bfloat16 SUM": 1,
             "allreduce torch.float32 MAX": 1, "allreduce torch.float32 AVG": 1, "broadcast": 1, "allgather": 1,
             "all_gather_single": 1, "barrier": 1}
"""What ``gloo_calls`` hands to Gloo, by the name the backend counts it under."""


def backend_rank(rank: int, switch_port: int, store_port: int, queue: mp.Queue) -> None:
    """Every claimed call once (their checks local where no switch sum is involved), then a few DDP steps."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist

    from hosts.switchml import SwitchMLClient
    from hosts.torch_backend import close_groups, register

    def client(group_rank: int, size: int) -> SwitchMLClient:
        return SwitchMLClient(group_rank, size, JOB, "127.0.0.1", switch_port=switch_port, bind_ipv4="127.0.0.1",
                              bind_port=BIND_PORT + group_rank, k=K, pool_size=POOL, retransmit=LOSSLESS, job_deadline_s=20)

    register(client)
    dist.init_process_group("switchml", init_method=f"tcp://127.0.0.1:{store_port}", rank=rank, world_size=N,
                            timeout=timedelta(seconds=60))
    try:
        report: dict = {"backend": dist.get_backend()}
        report["floats"] = floats_in_flight(rank)
        ints = torch.from_numpy(int_input(rank))
        dist.all_reduce(ints)
        report["ints"] = ints.numpy().copy()

        report["fallbacks"] = gloo_calls(rank)

        report |= ddp_steps(rank)
        queue.put((rank, report))
    finally:
        dist.destroy_process_group()
        close_groups()


def test_the_switchml_backend_sums_on_the_switch_and_falls_back_to_gloo_for_the_rest() -> None:
    require_torch()
    reports = run_ranks(backend_rank, N, K, BIND_PORT)
    assert {reports[rank]["backend"] for rank in range(N)} == {"switchml"}
    for index in range(len(SIZES)):
        want = expected_sum([float_input(rank, index) for rank in range(N)], K, N)
        for rank in range(N):
            assert np.array_equal(reports[rank]["floats"][index], want.values), f"tensor {index} on rank {rank}"
    for rank in range(N):
        assert np.array_equal(reports[rank]["ints"], sum(int_input(r) for r in range(N)))
        fallbacks = reports[rank]["fallbacks"]
        assert fallbacks == FALLBACKS, fallbacks
        assert np.array_equal(reports[rank]["parameters"], reports[0]["parameters"]), "DDP's ranks diverged"
    # more than one all-reduce a step (the first step's buckets are the small ones; DDP rebuilds them after it)
    assert reports[0]["ddp_calls"] > 3 and len({reports[rank]["ddp_calls"] for rank in range(N)}) == 1
    kept = [reports[rank]["kept"] for rank in range(N)]
    assert len({len(k) for k in kept}) == 1
    for index in range(len(kept[0])):
        inputs = [kept[rank][index][0] for rank in range(N)]
        if inputs[0].dtype == np.float32:  # a gradient bucket (DDP's unused-parameter counts are int32)
            want = expected_sum(inputs, K, N)
            for rank in range(N):
                assert np.array_equal(kept[rank][index][1], want.int_sum) and np.array_equal(kept[rank][index][2], want.values)


GLOO_N = 3
GLOO_STEPS = 8


def gloo_rank(rank: int, store_port: int, queue: mp.Queue) -> None:
    """The issue's flake: DDP with bucket_cap_mb=0.004 and the gloo hook, on the testbed_gloo
    backend: many small buckets a step, which Gloo completes on its threads in any order."""
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel

    from hosts.torch_backend import GROUPS, close_groups, register
    from hosts.torch_hook import GlooHookState, gloo_allreduce

    def no_switch(group_rank: int, size: int) -> None:
        raise AssertionError("testbed_gloo asked for a switch client")

    register(no_switch)
    dist.init_process_group("testbed_gloo", init_method=f"tcp://127.0.0.1:{store_port}", rank=rank, world_size=GLOO_N,
                            timeout=timedelta(seconds=60))
    try:
        torch.manual_seed(0)
        model = nn.Sequential(*(nn.Linear(32, 32) for _ in range(6)))  # 1,056 floats a layer: a bucket each
        ddp = DistributedDataParallel(model, bucket_cap_mb=0.004)
        ddp.register_comm_hook(GlooHookState(dist.group.WORLD, GLOO_N, keep=False), gloo_allreduce)
        generator = torch.Generator().manual_seed(rank)
        for _ in range(GLOO_STEPS):
            model.zero_grad()
            ddp(torch.randn(4, 32, generator=generator)).sum().backward()
        queue.put((rank, [(r.inputs, r.values) for r in GROUPS[0].records.kept()]))
    finally:
        dist.destroy_process_group()
        close_groups()


def test_gloo_records_keep_every_ranks_call_order_with_many_small_buckets() -> None:
    """The Gloo run that failed 'the ranks all-reduced different numbers of buckets: [2, 1, 1, 1]':
    its records were kept as buckets completed, and a rank whose bucket 1 completed before
    bucket 0 dropped the pass's first. Now every rank keeps the same calls in call order,
    each sum within the float32 bound of the ranks' inputs."""
    require_torch()
    from methods.verification import expected_for, float_sum

    context = mp.get_context("spawn")
    queue = context.Queue()
    procs = [context.Process(target=gloo_rank, args=(rank, BIND_PORT + 12, queue)) for rank in range(GLOO_N)]
    for proc in procs:
        proc.start()
    reports = collect(procs, queue)
    assert len({len(reports[rank]) for rank in range(GLOO_N)}) == 1 and len(reports[0]) >= 6 * GLOO_STEPS - 6
    for index in range(len(reports[0])):
        inputs = [reports[rank][index][0] for rank in range(GLOO_N)]
        for rank in range(GLOO_N):
            verdict = float_sum(expected_for(inputs, K), reports[rank][index][1])
            assert verdict.verified, f"record {index} on rank {rank}: {verdict.detail}"


def test_records_keep_the_order_of_the_calls_not_of_their_completions() -> None:
    require_torch()
    from hosts.torch_backend import RECORDED_BYTES, Records, Reduction

    records = Records()
    first, second = records.reserve(8), records.reserve(8)
    records.fill(second, Reduction(np.ones(2, np.float32), np.ones(2, np.float32), 0.5))
    assert records.kept() and records.kept()[0].seconds == 0.5 and records.calls == 1
    records.fill(first, Reduction(np.zeros(2, np.float32), np.zeros(2, np.float32), 0.25))
    assert [r.seconds for r in records.kept()] == [0.25, 0.5] and records.elements == 4
    big = records.reserve(RECORDED_BYTES)
    records.fill(big, Reduction(np.zeros(1, np.float32), np.zeros(1, np.float32), 1.0))
    assert [r.seconds for r in records.kept()] == [1.0], "only the most recent RECORDED_BYTES are kept, at least one call"
    assert records.calls == 3


def make_client(rank: int, size: int, switch_port: int, deadline_s: float = 20.0):
    from hosts.switchml import SwitchMLClient

    return SwitchMLClient(rank, size, JOB, "127.0.0.1", switch_port=switch_port, bind_ipv4="127.0.0.1",
                          bind_port=BIND_PORT + rank, k=K, pool_size=POOL, retransmit=LOSSLESS, job_deadline_s=deadline_s)


def joined(rank: int, store_port: int, clients) -> None:
    """``init_process_group("switchml")`` with the testbed's backends registered over ``clients``."""
    from datetime import timedelta

    import torch.distributed as dist

    from hosts.torch_backend import register

    register(clients)
    dist.init_process_group("switchml", init_method=f"tcp://127.0.0.1:{store_port}", rank=rank, world_size=N,
                            timeout=timedelta(seconds=60))


def flush_example(rank: int) -> np.ndarray:
    """Issue 44's example of block floating point: beside 1e20, the block's other elements are
    flushed to 0 (docs/pytorch.md)."""
    return np.array([1e-20, 1e20, -3.5, 0, 123456.789], dtype=np.float32) * np.float32(rank + 1)


NON_FINITE = {0: (3, np.inf), 1: (700, np.nan), 2: (3, 1.0)}
"""rank -> (index, value) written into its tensor: an inf, a NaN elsewhere, a finite value beside the inf."""


def non_finite_input(rank: int) -> np.ndarray:
    tensor = float_input(rank, 0)
    index, value = NON_FINITE[rank]
    tensor[index] = value
    return tensor


def non_finite_rank(rank: int, switch_port: int, store_port: int, queue: mp.Queue) -> None:
    """An all-reduce holding an inf on rank 0 and a NaN on rank 1, with one queued behind it
    (async), then a sum through the switch again."""
    import torch
    import torch.distributed as dist

    from hosts.torch_backend import GROUPS, close_groups, fallback_counts

    joined(rank, store_port, lambda group_rank, size: make_client(group_rank, size, switch_port))
    try:
        poisoned, behind = torch.from_numpy(non_finite_input(rank)), torch.from_numpy(float_input(rank, 1))
        works = [dist.all_reduce(poisoned, async_op=True), dist.all_reduce(behind, async_op=True)]
        for work in reversed(works):
            work.wait()
        after = torch.from_numpy(float_input(rank, 2))
        dist.all_reduce(after)
        flushed_before = GROUPS[0].records.flushed
        example = torch.from_numpy(flush_example(rank))
        dist.all_reduce(example)
        queue.put((rank, {"poisoned": poisoned.numpy().copy(), "behind": behind.numpy().copy(), "after": after.numpy().copy(),
                          "example": example.numpy().copy(), "flushed": GROUPS[0].records.flushed - flushed_before,
                          "calls": GROUPS[0].records.calls, "fallbacks": dict(fallback_counts(GROUPS))}))
    finally:
        dist.destroy_process_group()
        close_groups()


def test_an_inf_or_nan_on_one_rank_gives_every_rank_the_ieee_sum() -> None:
    """Issue 44, point 5: the inf no longer stops rank 0 while the others wait in the switch.
    Every rank learns from the lookahead round, and every rank gets Gloo's IEEE sum: inf where
    rank 0's inf met finite values, NaN where rank 1's NaN is, the rest the float sum. The
    all-reduces queued behind it and after it go through the switch, exact."""
    require_torch()
    reports = run_ranks(non_finite_rank, N, K, BIND_PORT)
    inputs = [non_finite_input(rank) for rank in range(N)]
    with np.errstate(invalid="ignore"):
        ieee = np.sum(np.stack(inputs).astype(np.float64), axis=0).astype(np.float32)
    assert np.isposinf(ieee[3]) and np.isnan(ieee[700]) and np.isfinite(np.delete(ieee, [3, 700])).all()
    for rank in range(N):
        got = reports[rank]["poisoned"]
        np.testing.assert_allclose(got, ieee, rtol=1e-6, atol=1e-6)  # inf and NaN where IEEE puts them
        assert np.array_equal(got, reports[0]["poisoned"], equal_nan=True), "every rank the same sum"
        for name, index in (("behind", 1), ("after", 2)):
            want = expected_sum([float_input(r, index) for r in range(N)], K, N)
            assert np.array_equal(reports[rank][name], want.values), f"{name} on rank {rank}"
        assert reports[rank]["calls"] == 3
        assert reports[rank]["example"][[0, 2, 3, 4]].tolist() == [0.0] * 4 and reports[rank]["example"][1] > 5e20
        assert reports[rank]["flushed"] == 3, "1e-20, -3.5 and 123456.789 times rank + 1: flushed beside 1e20"
        assert reports[rank]["fallbacks"] == {"allreduce torch.float32 SUM the switch cannot carry (Gloo's IEEE sum)": 1}


FAILING_CALL = 2
"""Rank 0's second all-reduce through the switch fails before it sends a packet."""


def failing_rank(rank: int, switch_port: int, store_port: int, queue: mp.Queue) -> None:
    """Rank 0's client raises on its second call; every rank's clients wait an hour for a
    result, so only the failure board can end the others' waits before the test's own limit."""
    import torch
    import torch.distributed as dist

    from hosts.switchml import SwitchMLClient
    from hosts.torch_backend import close_groups

    class Failing(SwitchMLClient):
        calls = 0

        def allreduce(self, tensor: np.ndarray):
            self.calls += 1
            if self.calls == FAILING_CALL:
                raise OSError("injected: the interface went away")
            return super().allreduce(tensor)

    def client(group_rank: int, size: int) -> SwitchMLClient:
        made = make_client(group_rank, size, switch_port, deadline_s=3600.0)
        if group_rank == 0:
            made.__class__ = Failing
        return made

    joined(rank, store_port, client)
    report: dict = {}
    try:
        first = torch.from_numpy(float_input(rank, 0))
        dist.all_reduce(first)
        report["first"] = first.numpy().copy()
        for name in ("second", "third"):  # the failing call, then one after it
            try:
                dist.all_reduce(torch.from_numpy(float_input(rank, 1)))
                report[name] = "returned"
            except Exception as error:  # torch may wrap the backend's exception
                report[name] = f"{type(error).__name__}: {error}"
        queue.put((rank, report))
    finally:
        dist.destroy_process_group()
        close_groups()


def test_a_failed_all_reduce_on_one_rank_raises_on_every_rank() -> None:
    """Issue 44, point 5: rank 0's all-reduce fails before it sends; the others, waiting in
    the switch for its packets with an hour's deadline, raise an error naming rank 0 and its
    cause (the failure board), and so do later calls on every rank; every rank exits."""
    require_torch()
    reports = run_ranks(failing_rank, N, K, BIND_PORT, timeout_s=120.0)
    want = expected_sum([float_input(rank, 0) for rank in range(N)], K, N)
    for rank in range(N):
        assert np.array_equal(reports[rank]["first"], want.values)
        for name in ("second", "third"):
            said = reports[rank][name]
            assert "AllReduceFailed" in said or "injected" in said, (rank, name, said)
            assert "injected: the interface went away" in said, (rank, name, said)
            assert rank == 0 or "on rank 0: injected" in said, (rank, name, said)
