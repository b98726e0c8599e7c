"""The eBPF target: its schema, its build, and a lifecycle that leaves nothing behind.

The packet-level behaviour runs through the ``target`` fixture (test_switch_*.py) and the
differential test; this file checks what is particular to a switch that lives in the
kernel: every map and filter goes away when it stops, also when its owner is killed; and
that a build for the largest k (1 KiB of elements, the per-CPU scratch map instead of the
stack) aggregates exactly and refuses packets of another k. The shared packet-level cases
run the default k.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest
from scapy.packet import Packet

from protocol import params
from protocol.packet import Endpoint, SwitchMLHeader, build_frame, encode_payload, frame_bytes
from switches import programming, standalone
from switches.control import ControlPlaneError
from switches.ebpf import compile as ebpf_compile
from switches.ebpf import datapath, maps
from switches.ebpf.bpf import BpfMap
from switches.ebpf.control import EbpfControl
from switches.embedded.pipeline import SwitchMLPipeline
from switches.standalone import run_switch
from tests.conftest import JOB, JOB_HOSTS, SwitchUnderTest, require_target
from tests.switch_io import SWITCH, SwitchPorts, dissect, update_frame
from base.netns import Testbed

POOL = 16
"""A small pool: a build of its own, and quick register resets."""
MAX_K = max(params.K_CHOICES)
"""The k whose elements (1 KiB) cannot live on the BPF stack."""


def test_schema_is_the_embedded_switchs() -> None:
    """Same tables (keys, actions, widths), registers and counters at every k: programming.py drives both."""
    for k in params.K_CHOICES:
        for pool in (POOL, params.MAX_POOL_SIZE):
            assert maps.program_schema(k, pool) == SwitchMLPipeline(k, pool).schema(), (k, pool)


def test_register_cells_follow_k() -> None:
    """struct slot_cells: a lock, then two cells of four u32 and k values each."""
    for k in params.K_CHOICES:
        assert ctypes.sizeof(maps.slot_cells(k)) == 4 + 2 * 4 * (4 + k)
        assert maps.aggregation_fields(k)[f"SwitchMLIngress.value_{k - 1:02d}"] == ("value", k - 1)


def test_action_numbers_are_distinct_and_defaults_are_zero() -> None:
    """Action 0 of every table is its P4 default: the kernel creates the default maps zeroed."""
    defaults = {"worker_table": "drop_unknown_sender", "uplink_table": "NoAction", "l2_learn_table": "l2_learn", "l2_table": "l2_flood", "rank_addr_table": "drop",
                "switch_addr_table": "NoAction"}
    for table in maps.TABLES.values():
        numbers = [number for number, _fields in table.actions.values()]
        assert sorted(numbers) == list(range(len(numbers))), table.map_name
        assert table.actions[defaults[table.map_name]][0] == 0


def test_build_hash_follows_options_and_sources(tmp_path: Path) -> None:
    options = ebpf_compile.CompileOptions(max_pool_size=POOL)
    assert ebpf_compile.build_hash(options) == ebpf_compile.build_hash(ebpf_compile.CompileOptions(max_pool_size=POOL))
    assert ebpf_compile.build_hash(options) != ebpf_compile.build_hash(ebpf_compile.CompileOptions(max_pool_size=POOL + 1))
    assert ebpf_compile.build_hash(options) != ebpf_compile.build_hash(ebpf_compile.CompileOptions(max_pool_size=POOL, k=MAX_K))
    assert f"-DSWITCHML_K={MAX_K}" in ebpf_compile.CompileOptions(k=MAX_K).command(tmp_path / "o")
    with pytest.raises(ValueError):
        ebpf_compile.CompileOptions(max_pool_size=1 << 16)
    with pytest.raises(ValueError, match="k must be one of"):
        ebpf_compile.CompileOptions(k=33)


def test_missing_clang_is_named(tmp_path: Path) -> None:
    with pytest.raises(ebpf_compile.EbpfCompileError, match="clang not found"):
        ebpf_compile.compile_program(ebpf_compile.CompileOptions(clang="no-such-clang"), build_root=tmp_path)


@pytest.mark.ebpf
def test_cache_holds_one_object_per_k(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Each k is built once, on first use (logged), into its own cache entry."""
    require_target("ebpf")
    with caplog.at_level(logging.INFO, logger=ebpf_compile.__name__):
        objects = {k: ebpf_compile.compile_program(ebpf_compile.CompileOptions(max_pool_size=POOL, k=k), tmp_path) for k in (params.K, MAX_K)}
        built = [r.getMessage() for r in caplog.records if r.getMessage().startswith("building")]
        assert [f"k = {k}," in line for line, k in zip(built, objects)] == [True, True], built
        caplog.clear()
        assert ebpf_compile.compile_program(ebpf_compile.CompileOptions(max_pool_size=POOL, k=MAX_K), tmp_path) == objects[MAX_K]
        assert not [r for r in caplog.records if r.getMessage().startswith("building")], "a cached k is not rebuilt"
    assert len({path.parent for path in objects.values()}) == 2 and all(path.is_file() for path in objects.values())
    assert objects[params.K].read_bytes() != objects[MAX_K].read_bytes()


# --------------------------------------------------------------------------------------
# In the kernel (root, clang, bpftool, bpf syscall, clsact)


def ingress_filters(ifname: str) -> list[dict]:
    result = subprocess.run(["tc", "-json", "filter", "show", "dev", ifname, "ingress"], capture_output=True, text=True, check=True)
    return [f for f in json.loads(result.stdout or "[]") if f.get("kind") == "bpf" and "options" in f]  # not the per-pref headers


def qdisc_kinds(ifname: str) -> set[str]:
    result = subprocess.run(["tc", "-json", "qdisc", "show", "dev", ifname], capture_output=True, text=True, check=True)
    return {q["kind"] for q in json.loads(result.stdout or "[]")}


def map_exists(map_id: int) -> bool:
    try:
        BpfMap.from_id(map_id).close()
    except FileNotFoundError:
        return False
    return True


def wait_until(condition: Callable[[], bool], timeout_s: float = 5.0) -> bool:
    """The kernel frees a program's maps after an RCU grace period, not at once."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def bed() -> Iterator[Testbed]:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    require_target("ebpf")
    with standalone.testbed(2) as testbed:
        yield testbed


@pytest.mark.netns
@pytest.mark.ebpf
def test_stop_removes_filters_qdiscs_pins_and_maps(bed: Testbed) -> None:
    switch = datapath.EbpfDataPlane(bed.switch_ports, name="lifecycle", max_pool_size=POOL)
    switch.start()
    try:
        for ifname in bed.switch_ports.values():
            assert len(ingress_filters(ifname)) == 1 and "clsact" in qdisc_kinds(ifname)
        assert not datapath.PIN_ROOT.exists(), "pins are removed once the filters hold the program"
        with switch.control() as control:
            assert control.schema == maps.program_schema(params.K, POOL)
            programming.program_forwarding(control, list(bed.switch_ports), {})
            assert control.table_num_entries(programming.L2_TABLE) == 0
        with pytest.raises(ControlPlaneError, match="built for another k"):
            EbpfControl(switch.map_ids, MAX_K)  # the register cells say the build's k
    finally:
        switch.stop()
    for ifname in bed.switch_ports.values():
        assert ingress_filters(ifname) == [] and "clsact" not in qdisc_kinds(ifname)
    assert wait_until(lambda: not any(map_exists(i) for i in switch.map_ids.values())), "maps outlived the switch"
    with pytest.raises(RuntimeError, match="not running"):
        switch.control()
    with pytest.raises(ControlPlaneError, match="has the switch stopped"):
        EbpfControl(switch.map_ids, params.K)


KILLED_OWNER = """
import json, os, signal, sys
from switches.ebpf.datapath import EbpfDataPlane
switch = EbpfDataPlane({int(k): v for k, v in json.loads(sys.argv[1]).items()}, name="killed", max_pool_size=int(sys.argv[2]))
switch.start()
print(json.dumps(switch.map_ids), flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.netns
@pytest.mark.ebpf
def test_killed_owner_leaves_nothing_once_its_ports_are_gone(bed: Testbed) -> None:
    """SIGKILL: no stop() runs. The filters keep the switch alive while its ports exist (so a
    crashed runner's network still forwards until torn down), and the kernel frees program
    and maps with the ports; nothing was ever left pinned."""
    ports = json.dumps(bed.switch_ports)
    child = subprocess.run([sys.executable, "-c", KILLED_OWNER, ports, str(POOL)], capture_output=True, text=True, cwd=params.REPO_ROOT)
    assert child.returncode == -signal.SIGKILL, child.stderr
    map_ids = json.loads(child.stdout)
    assert not datapath.PIN_ROOT.exists()
    assert all(len(ingress_filters(ifname)) == 1 for ifname in bed.switch_ports.values())
    assert all(map_exists(i) for i in map_ids.values())
    bed.close()
    assert wait_until(lambda: not any(map_exists(i) for i in map_ids.values())), "maps outlived the ports"


@pytest.mark.netns
@pytest.mark.ebpf
def test_start_removes_pins_of_a_dead_owner(bed: Testbed) -> None:
    """A kill while loading leaves a pin directory named after the owner's pid: the next start removes it."""
    dead_pid = 4_000_000  # above pid_max's largest value (2^22): never a live process
    datapath.ensure_bpffs()
    orphan = datapath.PIN_ROOT / f"{dead_pid}-crashed-0"
    orphan.mkdir(parents=True)
    switch = datapath.EbpfDataPlane(bed.switch_ports, name="sweeper", max_pool_size=POOL)
    switch.start()
    switch.stop()
    assert not orphan.exists() and not datapath.PIN_ROOT.exists()


@pytest.mark.netns
@pytest.mark.ebpf
def test_two_instances_keep_their_own_state(tmp_path: Path) -> None:
    """Two switches at once (two test beds): separate maps, so one's tables never show in the other."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    require_target("ebpf")
    with standalone.testbed(2) as first_bed, standalone.testbed(2) as second_bed:
        first = datapath.EbpfDataPlane(first_bed.switch_ports, name="first", max_pool_size=POOL)
        second = datapath.EbpfDataPlane(second_bed.switch_ports, name="second", max_pool_size=POOL)
        first.start()
        try:
            second.start()
            try:
                assert set(first.map_ids.values()).isdisjoint(second.map_ids.values())
                with first.control() as a, second.control() as b:
                    a.table_add(programming.L2_TABLE, "l2_forward", ["02:00:00:00:00:01"], [1])
                    a.register_write(programming.BITMAP_REGISTER, POOL + 3, 5)
                    assert b.table_num_entries(programming.L2_TABLE) == 0
                    assert b.register_read(programming.BITMAP_REGISTER, POOL + 3) == 0
                    assert a.register_read(programming.BITMAP_REGISTER, POOL + 3) == 5
            finally:
                second.stop()
        finally:
            first.stop()


# --------------------------------------------------------------------------------------
# The largest k in the kernel: JOB's two workers (conftest's test bed) on a build for MAX_K,
# and LEAF_JOB's (hosts 3 and 4), for which the switch is a leaf below host 2

LEAF_JOB = 21
SPINE_HOST = 2
LEAF_HOSTS = (3, 4)
LEAF = Endpoint("02:53:4d:4c:01:01", "10.0.0.253", params.UDP_PORT_BASE)
"""The switch's own address as a worker of the switch above (host 2)."""


@pytest.fixture(scope="module")
def switch_at_max_k(testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SwitchUnderTest]:
    require_target("ebpf")
    log_dir = tmp_path_factory.mktemp("ebpf-max-k")
    with run_switch("ebpf", testbed.switch_ports, log_dir, name="ebpf-max-k", k=MAX_K, max_pool_size=POOL) as running:
        hosts = testbed.hosts

        def workers(indices: tuple[int, ...]) -> list[programming.WorkerPort]:
            return [programming.WorkerPort(rank, hosts[h].switch_port, hosts[h].mac, hosts[h].ipv4) for rank, h in enumerate(indices)]

        uplink = programming.Uplink(hosts[SPINE_HOST].switch_port, LEAF.mac, LEAF.ipv4, params.SWITCH_MAC, params.SWITCH_IPV4)
        programming.program_forwarding(running.control, list(testbed.switch_ports), {})
        programming.program_jobs(running.control, [
            programming.JobProgram(JOB, workers(JOB_HOSTS[JOB]), result_mcast_grp=2, slot_base=0, pool_size=POOL // 2),
            programming.JobProgram(LEAF_JOB, workers(LEAF_HOSTS), result_mcast_grp=3, slot_base=POOL // 2, pool_size=POOL // 2, uplink=uplink),
        ])
        ports = SwitchPorts(testbed)
        try:
            yield SwitchUnderTest(running.control, ports, testbed)
        finally:
            ports.close()


@pytest.fixture
def max_k(switch_at_max_k: SwitchUnderTest) -> SwitchUnderTest:
    programming.reset_aggregation_state(switch_at_max_k.control)
    programming.reset_event_counters(switch_at_max_k.control)
    return switch_at_max_k


def wide_values(rng: np.random.Generator) -> np.ndarray:
    """MAX_K elements over the whole int32 range, so sums wrap."""
    return rng.integers(-(2**31), 2**31, MAX_K, dtype=np.int64).astype(np.int32)


def wrapping_sum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.astype(np.int64) + b).astype(np.uint32).astype(np.int32)


def elements_of(frame: Packet) -> tuple[int, int, int, list[int]]:
    """(msg_type, num_elements, exponent, elements) of a captured SwitchML frame of MAX_K elements."""
    assert len(frame) == frame_bytes(MAX_K)
    sml = dissect(frame)[3]
    return sml.msg_type, sml.num_elements, sml.exponent, sml.elements


@pytest.mark.netns
@pytest.mark.ebpf
def test_max_k_aggregates_exactly(max_k: SwitchUnderTest) -> None:
    """k elements through the scratch map and the unrolled loops: the multicast result and a
    retransmission's unicast copy carry the exact wrapping int32 sums, and the control plane
    reads the last element's register (value_255) from the k-sized cell."""
    rng = np.random.default_rng(256)
    a, b = wide_values(rng), wide_values(rng)
    expected = wrapping_sum(a, b)
    hosts = max_k.testbed.hosts
    slot, seq = 5, 77
    max_k.ports.send(0, update_frame(hosts[0], slot, 1, a, JOB, exponent=-2, seq=seq))
    max_k.ports.send(1, update_frame(hosts[1], slot, 1, b, JOB, exponent=3, seq=seq))
    received = max_k.ports.receive(2)
    max_k.ports.send(0, update_frame(hosts[0], slot, 1, a, JOB, exponent=-2, seq=seq))
    retransmitted = max_k.ports.receive(1)
    counts = max_k.counters()
    assert (len(received.results(0)), len(received.results(1)), len(retransmitted.results(0))) == (1, 1, 1), (received, counts)
    for frame in (*received.results(0), *received.results(1), *retransmitted.results(0)):
        assert elements_of(frame) == (params.MSG_RESULT, MAX_K, 3, expected.tolist())
    assert (counts["EV_UPDATE_CONSUMED"], counts["EV_RESULT_MULTICAST"], counts["EV_RESULT_UNICAST"]) == (1, 1, 1)
    cell = POOL + slot  # shadow set 1
    assert max_k.control.register_read(f"SwitchMLIngress.value_{MAX_K - 1}", cell) == int(expected[-1]) & 0xFFFFFFFF


@pytest.mark.netns
@pytest.mark.ebpf
def test_max_k_refuses_another_k(max_k: SwitchUnderTest) -> None:
    """A build for k takes exactly k elements: a packet of the default k, a header that
    says k - 1, and k elements with one more behind them (udp.length too long) are malformed."""
    host = max_k.testbed.hosts[0]
    elements = np.arange(MAX_K)
    for frame in (
        update_frame(host, 0, 0, elements[: params.K], JOB),
        update_frame(host, 0, 0, elements, JOB, num_elements=MAX_K - 1),
        update_frame(host, 0, 0, np.arange(MAX_K + 1), JOB, num_elements=MAX_K),
    ):
        max_k.ports.send(0, frame)
    assert max_k.ports.receive(0).total() == 0
    counts = max_k.counters()
    assert counts["EV_DROP_MALFORMED"] == 3 and sum(counts[event] for event in params.INGRESS_EVENTS) == 3



@pytest.mark.netns
@pytest.mark.ebpf
def test_max_k_leaf_sends_up_and_stores_the_result_from_above(max_k: SwitchUnderTest) -> None:
    """The leaf's two k-element paths: the partial sum goes up from the scratch cell (send_up),
    and the result from above is stored from it (6R) and multicast to the leaf's workers."""
    rng = np.random.default_rng(257)
    a, b, from_above = wide_values(rng), wide_values(rng), wide_values(rng)
    hosts = max_k.testbed.hosts
    slot, seq = 2, 9
    for rank, index in enumerate(LEAF_HOSTS):
        max_k.ports.send(index, update_frame(hosts[index], slot, 0, (a, b)[rank], LEAF_JOB, exponent=rank, seq=seq))
    sent_up = max_k.ports.receive(1).results(SPINE_HOST)
    assert len(sent_up) == 1 and elements_of(sent_up[0]) == (params.MSG_UPDATE, MAX_K, 1, wrapping_sum(a, b).tolist())
    header = SwitchMLHeader(params.MSG_RESULT, 0, LEAF_JOB, slot, MAX_K, 4, seq)
    max_k.ports.send(SPINE_HOST, build_frame(SWITCH, LEAF, encode_payload(header, from_above)))
    received = max_k.ports.receive(2)
    for index in LEAF_HOSTS:
        assert [elements_of(frame) for frame in received.results(index)] == [(params.MSG_RESULT, MAX_K, 4, from_above.tolist())]
    assert max_k.control.register_read(f"SwitchMLIngress.value_{MAX_K - 1}", POOL // 2 + slot) == int(from_above[-1]) & 0xFFFFFFFF
    counts = max_k.counters()
    assert (counts["EV_UPDATE_CONSUMED"], counts["EV_PARTIAL_UP"], counts["EV_RESULT_MULTICAST"]) == (1, 1, 1)
