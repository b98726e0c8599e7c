"""A config's ``cluster:`` section: validated as it loads, and the placement it implies
(network/cluster_config.py). No server is needed: nothing here connects anywhere."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from base.yamlschema import ConfigError
from experiments.config import load_experiment
from network.cluster import ServerUnavailableError, _check_switch_target
from network.cluster_config import LOCAL, Server
from protocol.params import REPO_ROOT

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

BASE = {
    "topology": {"file": "star.yaml", "workers": 8},
    "workload": {"kind": "synthetic", "elements": 4096},
    "methods": ["switchml"],
}
SERVERS = [{"name": "b", "address": "192.0.2.2", "checkout": "/srv/switchml"}]


def load(tmp_path: Path, cluster: dict, **sections) -> object:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({**BASE, **sections, "cluster": cluster}))
    return load_experiment(path)


def test_without_a_cluster_section_everything_is_on_this_machine(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(BASE))
    assert load_experiment(path).points[0].cluster is None


def test_a_star_spreads_its_hosts_in_rank_order_and_keeps_the_switch_here(tmp_path: Path) -> None:
    point = load(tmp_path, {"servers": SERVERS}).points[0]
    placement = point.cluster.place(point.topology)
    assert placement == {**{f"h{i}": LOCAL for i in range(1, 5)}, **{f"h{i}": "b" for i in range(5, 9)}, "s1": LOCAL}


def test_a_tree_keeps_each_leaf_with_its_hosts_so_only_uplinks_cross(tmp_path: Path) -> None:
    point = load(tmp_path, {"servers": SERVERS}, topology={"file": "tree.yaml", "workers": 8, "leaves": 2}).points[0]
    placement = point.cluster.place(point.topology)
    assert {placement[leaf.name] for leaf in point.topology.leaves} == {LOCAL, "b"}
    assert all(placement[h.name] == placement[leaf.name] for leaf in point.topology.leaves for h in point.topology.local_hosts(leaf.name))
    crossing = [link for link in point.topology.links if placement[link.a] != placement[link.b]]
    assert len(crossing) == 1 and point.topology.aggregator.name in (crossing[0].a, crossing[0].b)


def test_placement_may_name_any_nodes_server(tmp_path: Path) -> None:
    point = load(tmp_path, {"servers": SERVERS, "placement": {"s1": "b", "h8": LOCAL}}).points[0]
    placement = point.cluster.place(point.topology)
    assert placement["s1"] == "b" and placement["h8"] == LOCAL and placement["h5"] == "b"


@pytest.mark.parametrize("cluster, says", [
    ({"servers": SERVERS, "placement": {"h99": "b"}}, "cluster.placement: no node 'h99' in the topology"),
    ({"servers": SERVERS, "placement": {"h1": "c"}}, "cluster.placement.h1: no server 'c'; choose local or one of b"),
    ({"servers": [{**SERVERS[0], "name": "local"}]}, "cluster.servers: 'local' is this machine's name"),
    ({"servers": SERVERS * 2}, "cluster.servers: names must differ"),
    ({"servers": SERVERS, "link": "gre"}, "cluster.link"),
    ({"servers": [{"name": "b", "address": "192.0.2.2", "checkout": "relative/path"}]}, "checkout"),
    ({"servers": SERVERS, "ssh_config": "missing_ssh_config"}, "cluster.ssh_config: no file"),
])
def test_a_bad_cluster_section_is_refused_naming_the_key(tmp_path: Path, cluster: dict, says: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load(tmp_path, cluster)
    assert says in str(refused.value) and str(tmp_path / "c.yaml") in str(refused.value)


class _LocalShell:
    """A Cluster's ``check`` run here, with a PATH of the system's directories only: a server
    that has this checkout but none of the software installed outside them."""

    def check(self, server: str, command: str, what: str, timeout: float = 60.0) -> str:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
        assert done.returncode == 0, done.stderr
        return done.stdout


def test_a_server_that_lacks_what_its_switch_target_needs_is_refused_naming_it() -> None:
    server = Server(name="b", address="192.0.2.2", user="root", checkout=str(REPO_ROOT))
    with pytest.raises(ServerUnavailableError, match=r"^server b: cannot run the bmv2 switch placed there: it lacks simple_switch"):
        _check_switch_target(_LocalShell(), "b", server, "bmv2")
    _check_switch_target(_LocalShell(), "b", server, "embedded")  # needs nothing beyond the checkout


def test_every_run_numbers_its_vxlan_links_from_a_block_of_its_own() -> None:
    """A VNI a killed run left taken on a server must not be the next run's (network/cluster.py)."""
    from network.cluster import VNIS_PER_RUN, first_vni

    firsts = [first_vni(pid) for pid in range(1, 1 << 15)]
    assert min(firsts) >= 1 and max(firsts) + VNIS_PER_RUN - 2 <= (1 << 24) - 1  # VXLAN's 24 bits
    assert first_vni(4242) != first_vni(4243) and abs(first_vni(4242) - first_vni(4243)) >= VNIS_PER_RUN


def test_a_server_without_the_native_loop_makes_auto_run_the_python_worker_everywhere(tmp_path: Path) -> None:
    """What ``auto`` does where another server cannot build worker.c (experiments/data_path.py):
    one implementation for the whole point, named with the server's reason; ``native`` is refused."""
    from experiments.data_path import choose, needs_asking
    from hosts.switchml.native import DataPath

    asked = []

    def lacking(server: str) -> DataPath:
        asked.append(server)
        return DataPath("python", "the Python worker: the native data path is not available (no C compiler)")

    point = load(tmp_path, {"servers": SERVERS}).points[0]
    if point.data_path.name != "native":
        pytest.skip(f"the native loop does not build on this machine: {point.data_path.reason}")
    assert needs_asking(point)
    chosen = choose(point, lacking)
    assert asked == ["b"] and chosen.name == "python"
    assert "server b lacks the native data path" in chosen.reason and "no C compiler" in chosen.reason
    assert choose(point, lambda server: DataPath("native", "built")) is None
    assert choose(point, lambda server: None) is None  # not asked: the network's preflight names the server's problem
    experiment = load(tmp_path, {"servers": SERVERS}, protocol={"data_path": "native"})
    with pytest.raises(ConfigError, match="server b: protocol.data_path: native: .*no C compiler"):
        choose(experiment.points[0], lacking)
    assert experiment.with_data_paths({0: {"switchml": chosen}}).points[0].data_path == chosen


def test_only_servers_with_switchml_workers_are_asked_for_the_data_path(tmp_path: Path) -> None:
    from experiments.data_path import needs_asking

    assert not needs_asking(load(tmp_path, {"servers": SERVERS}, methods=["ring"]).points[0])
    assert not needs_asking(load(tmp_path, {"servers": SERVERS, "placement": {f"h{i}": LOCAL for i in range(1, 9)}}).points[0])
    assert not needs_asking(load(tmp_path, {"servers": SERVERS}, protocol={"data_path": "python"}).points[0])
