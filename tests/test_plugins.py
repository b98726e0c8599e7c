"""Each of the five plug-in kinds is its own record plus one registry line (docs/architecture.md, "to add").

Every test registers a toy plug-in in a temporary copy of its registry and shows that what
reads the registries (the config schema and checks, the runner's dispatch, the worker spec,
the cleanup) takes it without any other file knowing its name.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import experiments.kinds
import methods
import switches.embedded
import workloads.kinds
from base.yamlschema import ConfigError
from experiments.config import CONFIG_DIR, load_experiment
from experiments.harness import verify_results, worker_spec
from hosts.allreduce import build
from experiments.kinds import kind_of
from methods import verification
from network import cleanup
from switches import targets
from tests import toy_aggregation as toy
from workloads.workload import Workload, WorkloadInfo

MAIN = CONFIG_DIR / "8workers.yaml"


def ones(section, n_workers: int) -> list[np.ndarray]:
    return [np.ones(section["length"], dtype=section["dtype"]) for _ in range(n_workers)]


CONSTANT = Workload(
    name="constant",
    properties={"length": {"type": "integer", "minimum": 1}},
    required=("length",),
    describe=lambda section: WorkloadInfo(name="constant", elements=section["length"], compute_s=0.0),
    inputs=ones,
    host="hosts.worker:serve",
    experiment="sweep",
)
"""A workload of every rank's tensor all ones: a record and nothing else."""


def test_a_workload_is_its_record_plus_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workloads.kinds, "REGISTRY", (*workloads.kinds.REGISTRY, CONSTANT))
    experiment = load_experiment(MAIN, ["workload={kind: constant, length: 1000}"])
    point = experiment.points[0]
    assert (point.workload_info.elements, point.workload["length"]) == (1000, 1000)
    assert point.workload["seed"] == 1, "the common keys keep their defaults"
    assert [t.sum() for t in workloads.kinds.point_inputs(point.workload, 3)] == [1000.0] * 3
    assert kind_of(experiment) is experiments.kinds.by_name("sweep")
    assert worker_spec(point, "switchml").serve == "hosts.worker:serve"
    with pytest.raises(ConfigError, match=r"workload.*'length' is a required property"):
        load_experiment(MAIN, ["workload={kind: constant}"])
    with pytest.raises(ConfigError, match=r"workload\.elements"):
        load_experiment(MAIN, ["workload={kind: constant, length: 10, elements: 5}"])


def test_an_unregistered_workload_is_refused_naming_the_registered_ones() -> None:
    with pytest.raises(ConfigError, match=r"'constant' is not one of \['synthetic', 'trace', 'layers', 'training', 'torch', 'ddp_script'\]"):
        load_experiment(MAIN, ["workload={kind: constant, length: 1000}"])


TOY_METHOD = replace(methods.by_name("ring"), name="toy_ring", label="toy ring", colour="tab:purple")
"""A method: a record (here the ring's host code under another name) and nothing else."""


def test_a_method_is_its_record_plus_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(methods, "REGISTRY", (*methods.REGISTRY, TOY_METHOD))
    point = load_experiment(MAIN, ["methods=[switchml,toy_ring]"]).points[0]
    spec = worker_spec(point, "toy_ring")
    assert spec.protocol is None, "a method without a spec section gets no SwitchML parameters"
    assert worker_spec(point, "switchml").protocol is not None
    assert point.job_limit("toy_ring").seconds > 0, "its deadline follows from its record's bound"
    assert methods.by_name("toy_ring").verify is verification.float_sum


def test_an_experiment_kind_is_its_module_plus_one_registry_line(monkeypatch: pytest.MonkeyPatch) -> None:
    sweep = experiments.kinds.by_name("sweep")
    toy_kind = replace(sweep, name="toy_kind")
    monkeypatch.setattr(experiments.kinds, "KINDS", (*experiments.kinds.KINDS, toy_kind))
    monkeypatch.setattr(workloads.kinds, "REGISTRY", (*workloads.kinds.REGISTRY, replace(CONSTANT, experiment="toy_kind")))
    experiment = load_experiment(MAIN, ["workload={kind: constant, length: 64}"])
    assert kind_of(experiment) is toy_kind, "the workload's record names the kind that runs it"
    jobs = load_experiment(CONFIG_DIR / "shared_switch.yaml")
    assert kind_of(jobs) is experiments.kinds.by_name("shared_switch"), "a kind that claims a config comes first"


def test_a_switch_target_is_its_package_plus_one_registry_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A target's descriptor gives its link rate, its k, its leftovers; nothing else names it."""
    left = tmp_path / "toy-leftover"
    left.mkdir()

    def remove_leftovers() -> list[str]:
        left.rmdir()
        return [f"folder {left}"]

    embedded = targets.REGISTRY["embedded"]

    class ToyTarget(type(embedded)):  # type: ignore[misc]
        def remove_leftovers(self) -> list[str]:
            return remove_leftovers()

    toy = replace(ToyTarget(**{f.name: getattr(embedded, f.name) for f in fields(embedded)}), name="toy", auto_preference=99,
                  k_choices=(256,), link_rates={256: 4.0})
    monkeypatch.setitem(targets.REGISTRY, "toy", toy)
    point = load_experiment(MAIN, ["switch.target=toy"]).points[0]
    assert point.topology.link_mbps == 4.0, "topology.link.bw_mbps: target is the target's link_rates at k = 256"
    chosen = load_experiment(MAIN).with_target("toy")  # what auto chose, on the config as loaded
    assert (chosen.points[0].topology.link_mbps, chosen.data["switch"]["target"]) == (4.0, "toy")
    assert chosen.link_rate_source == "shipped SwitchTarget.link_rates of toy at k = 256"
    with pytest.raises(ConfigError, match=r"the toy target has a measured link rate for k = 256, not k = 64"):
        load_experiment(MAIN, ["switch.target=toy", "protocol.k=64"])
    with pytest.raises(ConfigError, match=r"the toy switch's program is built for k = 256; got k = 64"):
        load_experiment(MAIN, ["switch.target=toy", "protocol.k=64", "topology.link.bw_mbps=5"])
    monkeypatch.setattr(cleanup, "kill_marked_processes", lambda holders: [])
    monkeypatch.setattr(cleanup, "root_interfaces", lambda: [])
    monkeypatch.setattr(cleanup.tempfile, "gettempdir", lambda: str(tmp_path))
    assert f"folder {left}" in cleanup.clean_all() and not left.exists()


def test_an_in_network_protocol_is_its_own_files_plus_registry_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Toy sum (tests/toy_aggregation.py): its record, its method, and its program on the
    embedded target, each one registry line. A config names it, the schema takes its k, the
    spec carries its own parameters, the method prepares the switch through its record, its
    own worker class runs each rank, and every rank's sum of a 3-worker job verifies."""
    embedded = targets.REGISTRY["embedded"]
    monkeypatch.setattr(methods, "AGGREGATIONS", (*methods.AGGREGATIONS, toy.AGGREGATION))
    monkeypatch.setattr(methods, "REGISTRY", (*methods.REGISTRY, toy.METHOD))
    monkeypatch.setitem(switches.embedded.SIMULATED_PROGRAMS, toy.NAME, "tests.toy_aggregation:ToySwitch")
    monkeypatch.setitem(targets.REGISTRY, "embedded", replace(embedded, protocols=embedded.protocols | {toy.NAME}))
    n_workers, k = 3, 32
    experiment = load_experiment(MAIN, ["switch.target=embedded", f"methods=[{toy.NAME}]", f"topology.workers={n_workers}",
                                        f"protocol.k={k}", "protocol.pool_size=4", "topology.link.bw_mbps=10",
                                        "workload={kind: synthetic, elements: 320, dtype: int32}"])
    point = experiment.points[0]
    spec = worker_spec(point, toy.NAME)
    assert spec.protocol == {"k": k, "pool_size": 4, "job_id": 1}, "its own typed parameters, nothing of SwitchML's"

    switch = embedded.simulated(k=k, max_pool_size=point.data["switch"]["max_pool_size"], protocol=toy.NAME)
    control = switch.control()
    toy.program_switch(control, list(range(n_workers)))
    control.register_write("ToyIngress.count", 0, 2)  # a stale count a previous job left...
    methods.by_name(toy.NAME).prepare(SimpleNamespace(aggregating_controls=[control]), point.protocol)
    assert control.register_read("ToyIngress.count", 0) == 0, "...which the record's reset_switch cleared"

    workers = [build(spec, rank) for rank in range(n_workers)]
    assert all(type(worker) is toy.ToyWorker for worker in workers), "the toy's own host side"
    for rank, worker in enumerate(workers):
        switch.connect(rank, worker.receive)
    inputs = workloads.kinds.point_inputs(point.workload, n_workers)
    for rank, (worker, tensor) in enumerate(zip(workers, inputs)):
        for data in worker.frames(tensor):
            switch.receive(rank, data)
    results = [worker.result() for worker in workers]
    assert all(result is not None for result in results), "every chunk's sum came back to every rank"
    verdicts = verify_results(toy.NAME, verification.expected_for(inputs, k), [(result, None) for result in results], "toy job")
    assert [verdict.verified for verdict in verdicts] == [True] * n_workers, [v.detail for v in verdicts]
    assert control.counter_read("ToyIngress.packets")[0][0] == n_workers * 320 // k


def test_a_target_without_a_protocols_data_plane_refuses_its_methods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(methods, "AGGREGATIONS", (*methods.AGGREGATIONS, toy.AGGREGATION))
    monkeypatch.setattr(methods, "REGISTRY", (*methods.REGISTRY, toy.METHOD))
    runs = ", ".join(sorted(targets.REGISTRY["embedded"].protocols))
    with pytest.raises(ConfigError, match=rf"methods: the embedded target has no data plane for Toy sum \(it runs {runs}\)"):
        load_experiment(MAIN, ["switch.target=embedded", f"methods=[{toy.NAME}]", "protocol.k=32", "topology.link.bw_mbps=10"])
