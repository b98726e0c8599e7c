"""Each of the five plug-in kinds is its own record plus one registry line (docs/architecture.md, "to add").

Every test registers a toy plug-in in a temporary copy of its registry and shows that what
reads the registries (the config schema and checks, the runner's dispatch, the worker spec,
the cleanup) takes it without any other file knowing its name.
"""

from __future__ import annotations

import ipaddress
import subprocess
import sys
from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import experiments.kinds
import methods
import switches.embedded
import workloads.kinds
from base.plugin import resolve
from base.yamlschema import ConfigError
from experiments.config import CONFIG_DIR, load_experiment
from experiments.harness import verify_results, worker_spec
from hosts.allreduce import build
from experiments.kinds import kind_of
from methods import verification
from methods.aggregation import Aggregation, Job
from methods.method import Method, in_network
from network import cleanup
from protocol.params import REPO_ROOT
from protocol.worker_spec import WorkerSpec
from switches import targets
from switches.fabric import Fabric, Station, jobs_sharing
from tests import toy_aggregation as toy
from tests.conftest import require_target
from tests.toy_aggregation import ToyParameters
from topologies.model import find_topology, load_topology
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


def register_toy(monkeypatch: pytest.MonkeyPatch, aggregation: Aggregation = toy.AGGREGATION) -> Method:
    """Toy sum's registry lines, in temporary copies of the registries: its record, its method,
    and its program on the embedded target (the switch process's and the simulated one); its method."""
    method = in_network(aggregation, name=toy.NAME, label=toy.METHOD.label, colour=toy.METHOD.colour, verify=toy.METHOD.verify,
                        bound=toy.METHOD.bound)
    embedded = targets.REGISTRY["embedded"]
    monkeypatch.setattr(methods, "AGGREGATIONS", (*methods.AGGREGATIONS, aggregation))
    monkeypatch.setattr(methods, "REGISTRY", (*methods.REGISTRY, method))
    monkeypatch.setitem(switches.embedded.SIMULATED_PROGRAMS, toy.NAME, toy.PROGRAM)
    monkeypatch.setitem(switches.embedded.PROGRAMS, toy.NAME, toy.PROGRAM)
    monkeypatch.setitem(targets.REGISTRY, "embedded", replace(embedded, protocols=embedded.protocols | {toy.NAME}))
    return method


def test_an_in_network_protocol_is_its_own_files_plus_registry_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Toy sum (tests/toy_aggregation.py): its record, its method, and its program on the
    embedded target, each one registry line. A config names it, the schema takes its k, the
    spec carries its own parameters, its programmer and the method's preparation ready the
    switch through its record, its own worker class runs each rank, and every rank's sum of a
    3-worker job verifies."""
    register_toy(monkeypatch)
    embedded = targets.REGISTRY["embedded"]
    n_workers, k = 3, 32
    experiment = load_experiment(MAIN, ["switch.target=embedded", f"methods=[{toy.NAME}]", f"topology.workers={n_workers}",
                                        f"protocol.k={k}", "protocol.pool_size=4", "topology.link.bw_mbps=10",
                                        "workload={kind: synthetic, elements: 320, dtype: int32}"])
    point = experiment.points[0]
    spec = worker_spec(point, toy.NAME)
    assert spec.protocol == {"k": k, "pool_size": 4, "job_id": 1}, "its own typed parameters, nothing of SwitchML's"

    switch = embedded.simulated(k=k, max_pool_size=point.data["switch"]["max_pool_size"], protocol=toy.NAME)
    control = switch.control()
    hosts = tuple(Station(f"h{rank + 1}", f"02:00:00:00:00:{rank + 1:02x}", f"10.0.0.{rank + 1}") for rank in range(n_workers))
    star = Fabric(switches=("s1",), aggregator=Station("s1", "02:53:4d:4c:00:01", "10.0.0.254"), leaves={}, hosts=hosts,
                  hierarchical=False, ports={"s1": tuple(range(n_workers))}, towards={("s1", h.name): rank for rank, h in enumerate(hosts)})
    parameters = ToyParameters.read(spec.protocol)
    resolve(toy.AGGREGATION.program_fabric)({"s1": control}, star, jobs_sharing(parameters, [h.name for h in hosts]))
    control.register_write("ToyIngress.count", 0, 2)  # a stale count a previous job left...
    methods.by_name(toy.NAME).prepare(SimpleNamespace(aggregating_controls=[control]), point.protocol)
    assert control.register_read("ToyIngress.count", 0) == 0, "...which the record's reset_switch cleared"

    ranks = [build(spec, rank) for rank in range(n_workers)]
    assert all(type(rank) is toy.ToyMethod for rank in ranks), "the toy's own host side"
    workers = [rank.worker for rank in ranks]
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


TOY_K = 32
TOY_ELEMENTS = 10 * TOY_K
"""Ten chunks: fewer than the switch's slots, which the toy has no window over."""


def toy_network_run(net: Any, method: Method, tmp_path: Path, n_workers: int, serving: bool = False) -> tuple[list[np.ndarray], list]:
    """The toy's method prepared on ``net`` (an EmulatedNetwork) and one job run by its own
    worker processes on the hosts (and its servers, if ``serving``): the inputs and every rank's verdict."""
    net.prepare(method)
    rng = np.random.default_rng(7)
    inputs = [rng.integers(-1000, 1000, TOY_ELEMENTS, dtype=np.int32) for _ in range(n_workers)]
    paths = []
    for rank, tensor in enumerate(inputs):
        paths.append(str(tmp_path / f"input{rank}.npy"))
        np.save(paths[-1], tensor)
    spec = WorkerSpec(method=toy.NAME, n_workers=n_workers, switch_ipv4=net.topology.aggregator_ipv4, link_mbps=None,
                      protocol={"k": TOY_K, "pool_size": 4, "job_id": 1}, peers=(), job_timeout_s=30.0, connect_timeout_s=30.0,
                      inputs=tuple(paths))
    spec_path = spec.write(tmp_path / "spec.json")
    go = tmp_path / "go"
    with net.serving({0: spec_path}) as servers:  # each serving once it is entered
        workers = [net.host(host.name).popen([sys.executable, "-m", "tests.toy_aggregation", str(spec_path), "--rank", str(rank),
                                              "--go", str(go), "--output", str(tmp_path / f"result{rank}.npy")],
                                             cwd=str(REPO_ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                   for rank, host in enumerate(net.topology.hosts)]
        try:
            for worker in workers:
                assert worker.stdout.readline().strip() == "ready", worker.stdout.read()
            go.touch()
            for rank, worker in enumerate(workers):
                output, _ = worker.communicate(timeout=60)
                assert worker.returncode == 0, f"rank {rank}: {output}"
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
        if serving:
            for server in servers:
                server.process.wait(timeout=30)
            # its counts as it wrote them when its job was done (hosts/server.py), what the runner records per job
            assert net.server_counts() == [{"chunks_received": TOY_ELEMENTS // TOY_K}] * len(servers)
    results = [(np.load(tmp_path / f"result{rank}.npy"), None) for rank in range(n_workers)]
    return inputs, verify_results(toy.NAME, verification.expected_for(inputs, TOY_K), results, "toy job")


@pytest.mark.mininet
def test_the_toy_protocol_runs_a_verified_job_through_mininet_after_switchml(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Issue 39's toy on the emulated network: the switches start on SwitchML's program (the
    run's first job), ``prepare`` loads the toy's in the switch process, the toy's own
    workers (raw Ethernet frames of its EtherType) sum through it and verify; preparing
    SwitchML again loads SwitchML's, which answers the hosts' ping again."""
    from network.emulation import EmulatedNetwork, node_runner
    from protocol.worker_spec import SwitchMLParameters

    require_target("embedded")
    method = register_toy(monkeypatch)
    n_workers = 3
    topology = load_topology(find_topology("star"), {"workers": n_workers})
    hosts = tuple(h.name for h in topology.hosts)
    switchml = methods.SWITCHML
    jobs = [Job(switchml.aggregation, SwitchMLParameters(k=TOY_K, pool_size=8, job_id=1, timeout_ms=20.0, backoff_every=1), hosts),
            Job(toy.AGGREGATION, ToyParameters(k=TOY_K, pool_size=4, job_id=1), hosts)]
    with EmulatedNetwork(topology, "embedded", tmp_path / "logs", k=TOY_K, max_pool_size=64, jobs=jobs) as net:
        assert net.loaded is switchml.aggregation
        _, verdicts = toy_network_run(net, method, tmp_path, n_workers)
        assert [verdict.verified for verdict in verdicts] == [True] * n_workers, [v.detail for v in verdicts]
        assert net.loaded is toy.AGGREGATION
        counted = net.aggregator_control.counter_read("ToyIngress.packets")[0][0]
        assert counted == n_workers * TOY_ELEMENTS // TOY_K, "the switch process ran the toy's program"
        net.prepare(switchml)
        code, out = node_runner(net.host(hosts[0]))(["ping", "-c", "1", "-W", "2", topology.aggregator_ipv4])
        assert code == 0, f"SwitchML's program is back and answers for the switch's address: {out}"
    log = (tmp_path / "logs" / "s1.log").read_text()
    assert log.count("switch running") == 3 and toy.PROGRAM in log


@pytest.mark.mininet
def test_a_protocol_that_asks_for_servers_gets_them_on_the_aggregating_switch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A test-only record of the toy with one server per job: the network adds the server
    host, cabled to the aggregating switch with the workers' link, addressed in the subnet,
    reachable from a worker, and runs the protocol's server on it, which gets its job's sums."""
    from network.emulation import EmulatedNetwork, node_runner

    require_target("embedded")
    served = replace(toy.AGGREGATION, servers_per_job=1, server="tests.toy_aggregation:ToyServer")
    method = register_toy(monkeypatch, served)
    n_workers = 2
    topology = load_topology(find_topology("star"), {"workers": n_workers, "link": {"bw_mbps": 20}})
    hosts = tuple(h.name for h in topology.hosts)
    jobs = [Job(served, ToyParameters(k=TOY_K, pool_size=4, job_id=1), hosts)]
    with EmulatedNetwork(topology, "embedded", tmp_path / "logs", k=TOY_K, max_pool_size=64, jobs=jobs) as net:
        [server] = net.servers
        links = {link["interface"]: link for link in net.describe()["links"]}
        assert links[f"{server.name}-eth0"]["bandwidth"] == links[f"{hosts[0]}-eth0"]["bandwidth"], "shaped as the workers' link"
        assert ipaddress.IPv4Address(server.ipv4) in topology.subnet and server.ipv4 not in {h.ipv4 for h in topology.hosts} | {topology.aggregator_ipv4}
        code, out = node_runner(net.host(hosts[0]))(["ping", "-c", "1", "-W", "2", server.ipv4])
        assert code == 0, f"a worker reaches the server through the toy's ordinary forwarding: {out}"
        inputs, verdicts = toy_network_run(net, method, tmp_path, n_workers, serving=True)
        assert [verdict.verified for verdict in verdicts] == [True] * n_workers, [v.detail for v in verdicts]
        np.testing.assert_array_equal(np.load(tmp_path / "server-job1-0.npy"), np.sum(inputs, axis=0, dtype=np.int32))
        assert net.server_addresses(0) == (server.ipv4,)


def test_a_target_without_a_protocols_data_plane_refuses_its_methods(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(methods, "AGGREGATIONS", (*methods.AGGREGATIONS, toy.AGGREGATION))
    monkeypatch.setattr(methods, "REGISTRY", (*methods.REGISTRY, toy.METHOD))
    runs = ", ".join(sorted(targets.REGISTRY["embedded"].protocols))
    with pytest.raises(ConfigError, match=rf"methods: the embedded target has no data plane for Toy sum \(it runs {runs}\)"):
        load_experiment(MAIN, ["switch.target=embedded", f"methods=[{toy.NAME}]", "protocol.k=32", "topology.link.bw_mbps=10"])
    with pytest.raises(ValueError, match=r"the embedded switch has no program for toysum \(it runs switchml, atp\)"):
        targets.REGISTRY["embedded"].program_of(toy.NAME)
