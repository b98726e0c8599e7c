"""The worker spec round-trips through its JSON file, and a broken one is named as such."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import methods

from protocol.worker_spec import SwitchMLParameters, TrainingSection, WorkerSpec

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

SPEC = WorkerSpec(
    method="switchml", n_workers=2, switch_ipv4="10.0.0.254", link_mbps=5.0,
    protocol=SwitchMLParameters(k=32, pool_size=64, job_id=3, timeout_ms=20.0, backoff_every=100),
    peers=(("10.0.0.1", 47000), ("10.0.0.2", 47000)), job_timeout_s=60.0, connect_timeout_s=30.0,
    inputs=("a.npy", "b.npy"),
)  # fmt: skip


def test_what_the_runner_writes_the_worker_reads(tmp_path: Path) -> None:
    assert WorkerSpec.read(SPEC.write(tmp_path / "spec.json")) == SPEC
    trained = replace(SPEC, inputs=(), training=TrainingSection({"steps": 3}, "dataset.npz"))
    assert WorkerSpec.read(trained.write(tmp_path / "training.json")) == trained


def test_one_job_of_several_keeps_the_rest() -> None:
    job = SPEC.with_job(n_workers=1, job_id=7, pool_size=16)
    assert (job.n_workers, job.protocol["job_id"], job.protocol["pool_size"]) == (1, 7, 16)
    assert (job.protocol["k"], job.peers, job.inputs) == (SPEC.protocol["k"], SPEC.peers, SPEC.inputs)


def test_a_spec_without_a_key_is_refused_naming_it(tmp_path: Path) -> None:
    path = SPEC.write(tmp_path / "spec.json")
    data = json.loads(path.read_text())
    del data["protocol"]["pool_size"]
    path.write_text(json.dumps(data))
    spec = WorkerSpec.read(path)  # the protocol's parameters are its own to read
    with pytest.raises(ValueError, match="not a SwitchML job's parameters.*pool_size"):
        methods.aggregation("switchml").read_parameters(spec.protocol)
    del data["peers"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="not a worker spec.*peers"):
        WorkerSpec.read(path)
