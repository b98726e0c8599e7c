"""SwitchML's programmer (switches/switchml/programming.py's ``program_fabric``) programs a network from
the facts the network hands it (switches/fabric.py): who aggregates, with which pool, and how
the rest is forwarded."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import pytest

from protocol.switchml import params
from switches import drop_simulator
from switches.switchml import programming
from switches.fabric import Fabric, Leaf, SharedJob, Station, jobs_sharing
from switches.switchml.programming import program_fabric
from tests.test_p4_contract import RecordingControl

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

HOSTS = tuple(Station(f"h{i}", f"02:00:00:00:00:{i + 1:02x}", f"10.0.0.{i + 1}") for i in range(4))
SPINE = Station("s1", "02:00:00:00:01:00", "10.0.0.254")


@dataclass(frozen=True)
class Parameters:
    """A job's parameters as the programmer reads them (SwitchML's have more fields it does not read)."""

    k: int
    job_id: int
    pool_size: int


def job(job_id: int, pool_size: int, shared: tuple[SharedJob, ...] = ()) -> tuple:
    """One job of every host, or the shared ones."""
    return jobs_sharing(Parameters(params.DEFAULT_K, job_id, pool_size), [h.name for h in HOSTS], shared)


def star(drop_rates: dict[str, tuple[float, float]] | None = None) -> Fabric:
    """Four hosts on ports 1..4 of one switch."""
    return Fabric(switches=("s1",), aggregator=SPINE, leaves={}, hosts=HOSTS, hierarchical=False, ports={"s1": (1, 2, 3, 4)},
                  towards={("s1", h.name): i + 1 for i, h in enumerate(HOSTS)}, drop_rates=drop_rates)


def tree() -> Fabric:
    """Two leaves (s2: h0, h1; s3: h2, h3), each on its port 3 to the spine's ports 1 and 2."""
    leaves = {"s2": Leaf(Station("s2", "02:00:00:00:02:01", "10.0.0.253"), ("h0", "h1")),
              "s3": Leaf(Station("s3", "02:00:00:00:02:02", "10.0.0.252"), ("h2", "h3"))}
    towards = {("s1", "s2"): 1, ("s1", "s3"): 2, ("s2", "s1"): 3, ("s3", "s1"): 3, ("s2", "s3"): 3, ("s3", "s2"): 3}
    for i, h in enumerate(HOSTS):
        own, other = ("s2", "s3") if i < 2 else ("s3", "s2")
        towards |= {(own, h.name): i % 2 + 1, (other, h.name): 3, ("s1", h.name): 1 if i < 2 else 2}
    return Fabric(switches=("s1", "s2", "s3"), aggregator=SPINE, leaves=leaves, hosts=HOSTS, hierarchical=True,
                  ports={"s1": (1, 2), "s2": (1, 2, 3), "s3": (1, 2, 3)}, towards=towards)


def table_adds(control: RecordingControl, table: str) -> list[tuple]:
    """(keys, action parameters) of every entry added to ``table``, as the control plane
    hands them to the target (IPv4 and MAC addresses as integers)."""
    return [args[2:] for verb, args in control.calls if verb == "table_add" and args[0] == table]


def ip(address: str) -> int:
    return int(ipaddress.IPv4Address(address))


def mac(address: str) -> int:
    return int(address.replace(":", ""), 16)


def test_a_single_job_gets_the_configured_pool_not_every_register_cell() -> None:
    control = RecordingControl()
    program_fabric({"s1": control}, star(), job(3, 16))
    workers = table_adds(control, programming.WORKER_TABLE)
    assert workers == [((i + 1, ip(h.ipv4)), (i, 3, 4, 2, 0, 16)) for i, h in enumerate(HOSTS)]
    assert sorted(table_adds(control, programming.L2_TABLE)) == sorted(((mac(h.mac),), (i + 1,)) for i, h in enumerate(HOSTS))


def test_shared_jobs_split_the_slots_and_groups() -> None:
    control = RecordingControl()
    shared = (SharedJob(5, ("h0", "h1"), 8), SharedJob(6, ("h2", "h3"), 24))
    program_fabric({"s1": control}, star(), job(1, 64, shared))
    assert [params for _, params in table_adds(control, programming.WORKER_TABLE)] == [
        (0, 5, 2, 2, 0, 8), (1, 5, 2, 2, 0, 8), (0, 6, 2, 3, 8, 24), (1, 6, 2, 3, 8, 24)]


def test_hierarchical_leaves_aggregate_their_hosts_below_the_spine() -> None:
    controls = {name: RecordingControl() for name in ("s1", "s2", "s3")}
    fabric = tree()
    program_fabric(controls, fabric, job(1, 32))
    spine_workers = table_adds(controls["s1"], programming.WORKER_TABLE)
    assert spine_workers == [((1, ip("10.0.0.253")), (0, 1, 2, 2, 0, 32)), ((2, ip("10.0.0.252")), (1, 1, 2, 2, 0, 32))]
    assert table_adds(controls["s3"], programming.UPLINK_TABLE) == [
        ((1,), (3, mac("02:00:00:00:02:02"), ip("10.0.0.252"), mac(SPINE.mac), ip(SPINE.ipv4), 2, 2, 0, 32))]
    assert ((mac(SPINE.mac),), (3,)) in table_adds(controls["s2"], programming.L2_TABLE)
    assert fabric.aggregating() == ["s1", "s2", "s3"]
    assert star().aggregating() == ["s1"]


def test_other_switches_pass_switchml_through_and_drop_rates_are_set() -> None:
    controls = {name: RecordingControl() for name in ("s1", "s2", "s3")}
    fabric = tree()
    flat = Fabric(fabric.switches, fabric.aggregator, fabric.leaves, fabric.hosts, False, fabric.ports, fabric.towards,
                  drop_rates={"s1": (0.0, 0.0), "s2": (0.5, 0.5), "s3": (0.5, 0.5)})
    program_fabric(controls, flat, job(1, 32))
    assert ("table_set_default", (programming.WORKER_TABLE, "forward_as_ordinary", (), ())) in controls["s2"].calls
    assert not table_adds(controls["s2"], programming.WORKER_TABLE)
    half = drop_simulator.probability_threshold(0.5)
    assert ("register_write", (programming.INGRESS_DROP_THRESHOLD, 0, half)) in controls["s3"].calls
    assert len(table_adds(controls["s1"], programming.WORKER_TABLE)) == 4


def test_every_switch_answers_for_its_own_address() -> None:
    """ARP and ping: the aggregator for the workers' virtual address, a leaf for its own."""
    controls = {name: RecordingControl() for name in ("s1", "s2", "s3")}
    fabric = tree()
    program_fabric(controls, fabric, job(1, 32))
    own = {"s1": SPINE, "s2": fabric.leaves["s2"].station, "s3": fabric.leaves["s3"].station}
    for name, station in own.items():
        assert table_adds(controls[name], programming.SWITCH_ADDR_TABLE) == [((ip(station.ipv4),), (mac(station.mac),))], name


def test_with_no_job_every_switch_only_forwards_and_answers_for_its_address() -> None:
    """The program a network starts with when no job needs a protocol (the baselines): no
    worker, ordinary forwarding, the switch's own address."""
    control = RecordingControl()
    program_fabric({"s1": control}, star(), ())
    assert not table_adds(control, programming.WORKER_TABLE)
    assert len(table_adds(control, programming.L2_TABLE)) == len(HOSTS)
    assert table_adds(control, programming.SWITCH_ADDR_TABLE) == [((ip(SPINE.ipv4),), (mac(SPINE.mac),))]


def test_servers_are_forwarded_to_like_hosts_but_are_no_workers() -> None:
    """A protocol's servers (Fabric.servers) get static L2 entries on every switch; SwitchML's
    programmer makes only the job's hosts workers."""
    server = Station("srv1", "02:00:00:01:00:01", "10.0.0.250")
    fabric = tree()
    towards = {**fabric.towards, ("s1", "srv1"): 4, ("s2", "srv1"): 3, ("s3", "srv1"): 3}
    with_server = Fabric(fabric.switches, fabric.aggregator, {}, fabric.hosts, False, {"s1": (1, 2, 4)}, towards, servers=(server,))
    assert with_server.l2_entries("s1")[server.mac] == 4
    control = RecordingControl()
    program_fabric({"s1": control}, Fabric(("s1",), SPINE, {}, HOSTS, False, {"s1": (1, 2, 3, 4, 5)},
                                           {**star().towards, ("s1", "srv1"): 5}, servers=(server,)), job(1, 16))
    assert ((mac(server.mac),), (5,)) in table_adds(control, programming.L2_TABLE)
    assert [keys for keys, _ in table_adds(control, programming.WORKER_TABLE)] == [(i + 1, ip(h.ipv4)) for i, h in enumerate(HOSTS)]
