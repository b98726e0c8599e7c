"""The gloo method (PyTorch's Gloo all-reduce) on the emulated network, beside the ring.

Needs the optional torch extra: skipped where it is absent, saying how to install it, and a
failure where SWITCHML_REQUIRE_TORCH=1 (.ci/run).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from pathlib import Path

import numpy as np

import pandas as pd
import pytest

from methods import ring
from protocol.worker_spec import SwitchMLParameters, WorkerSpec
from workloads.synthetic import synthetic_tensor
from tests.conftest import require_torch
from tests.experiment_runs import leftovers, run_experiment

pytestmark = [pytest.mark.torch]

ELEMENTS = 20000
WORKERS = 4


@pytest.mark.mininet
@pytest.mark.slow
def test_gloo_runs_beside_the_ring_through_the_embedded_switch_and_verifies(tmp_path: Path) -> None:
    require_torch()
    if os.geteuid() != 0:
        pytest.skip("Mininet tests need root")
    out = tmp_path / "run"
    done = run_experiment(out, f"topology.workers={WORKERS}", f"workload.elements={ELEMENTS}", "repetitions=2",
                          "methods=[ring,gloo]")
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True and set(summary["methods"]) == {"ring", "gloo"}
    runs = pd.read_csv(out / "runs.csv")
    gloo = runs[runs["method"] == "gloo"]
    assert len(gloo) == 2 * WORKERS and gloo["verified"].all()
    assert (gloo["tat_s"] > 0).all() and (gloo["packets_sent"] > 0).all()
    assert "gloo" in done.stdout and "verified: true" in done.stdout
    assert not leftovers(str(out))


def loopback_rank(spec: WorkerSpec, rank: int, queue: mp.Queue) -> None:
    """Two all-reduces of one rank (the second on the same group), reporting sums and stats."""
    from hosts.gloo_allreduce import GlooMethod

    method = GlooMethod(spec, rank)
    try:
        reports = []
        for dtype in ("float32", "int32"):
            values, int_sum, stats = method.allreduce(synthetic_tensor(ELEMENTS, dtype, seed=3, rank=rank))
            reports.append((values, int_sum, stats))
        queue.put((rank, reports))
    finally:
        method.close()


def test_gloo_rank_sums_and_counts_the_ring_payload_on_loopback() -> None:
    """Three ranks on 127.0.0.1 (interface lo, no root): exact int32 sums, float32 sums within
    n-term summation, and bytes per rank the ring's 2(n-1)/n of the tensor plus Gloo's headers."""
    require_torch()
    n = 3
    spec = WorkerSpec(method="gloo", n_workers=n, switch_ipv4="127.0.0.254", link_mbps=None,
                      protocol=SwitchMLParameters(k=32, pool_size=64, job_id=1, timeout_ms=20, backoff_every=8),
                      peers=tuple(("127.0.0.1", 47919) for _ in range(n)), job_timeout_s=20.0, connect_timeout_s=60.0)
    context = mp.get_context("spawn")
    queue = context.Queue()
    procs = [context.Process(target=loopback_rank, args=(spec, rank, queue)) for rank in range(n)]
    for proc in procs:
        proc.start()
    reports = dict(queue.get(timeout=120) for _ in procs)
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    payload = ring.traffic_per_tensor_byte(n) * ELEMENTS * 4
    for index, dtype in enumerate(("float32", "int32")):
        inputs = [synthetic_tensor(ELEMENTS, dtype, seed=3, rank=rank) for rank in range(n)]
        exact = np.sum([x.astype(np.float64) for x in inputs], axis=0)
        for rank in range(n):
            values, int_sum, stats = reports[rank][index]
            assert int_sum is None and values.dtype == np.dtype(dtype)
            if dtype == "int32":
                assert np.array_equal(values, exact.astype(np.int32))
            else:
                assert np.allclose(values, exact, rtol=0, atol=n * 2.0**-23 * np.abs(inputs).sum(axis=0).max())
            assert payload <= stats.bytes_sent <= 1.05 * payload, stats.bytes_sent
            assert payload <= stats.bytes_received <= 1.05 * payload, stats.bytes_received
            assert stats.tat_s > 0 and stats.packets_sent > 0 and sum(stats.timeline) > 0
