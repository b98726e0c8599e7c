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

import pytest

from protocol import params
from protocol.switchml import params as switchml_params
from switches import standalone
from switches.switchml import programming
from switches.control import ControlPlaneError
from switches.ebpf.switchml import compile as ebpf_compile
from switches.ebpf import loader
from switches.ebpf.clang import EbpfCompileError
from switches.ebpf.switchml import datapath, maps
from switches.ebpf.bpf import BpfMap
from switches.ebpf.switchml.control import EbpfControl
from switches.embedded.switchml.pipeline import SwitchMLPipeline
from tests.conftest import require_target
from base.netns import Testbed

POOL = 16
"""A small pool: a build of its own, and quick register resets."""
MAX_K = max(switchml_params.K_CHOICES)
"""The k whose elements (1 KiB) cannot live on the BPF stack."""
K = min(switchml_params.K_CHOICES)
"""The k of a case that does not depend on it: the smallest, whose elements fit the stack."""


def test_schema_is_the_embedded_switchs() -> None:
    """Same tables (keys, actions, widths), registers and counters at every k: programming.py drives both."""
    for k in switchml_params.K_CHOICES:
        for pool in (POOL, switchml_params.MAX_POOL_SIZE):
            assert maps.program_schema(k, pool) == SwitchMLPipeline(k, pool).schema(), (k, pool)


def test_register_cells_follow_k() -> None:
    """struct slot_cells: a lock, then two cells of four u32 and k values each."""
    for k in switchml_params.K_CHOICES:
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
    options = ebpf_compile.CompileOptions(k=K, max_pool_size=POOL)
    assert ebpf_compile.build_hash(options) == ebpf_compile.build_hash(ebpf_compile.CompileOptions(k=K, max_pool_size=POOL))
    assert ebpf_compile.build_hash(options) != ebpf_compile.build_hash(ebpf_compile.CompileOptions(k=K, max_pool_size=POOL + 1))
    assert ebpf_compile.build_hash(options) != ebpf_compile.build_hash(ebpf_compile.CompileOptions(max_pool_size=POOL, k=MAX_K))
    assert f"-DSWITCHML_K={MAX_K}" in ebpf_compile.CompileOptions(k=MAX_K).command(tmp_path / "o")
    with pytest.raises(ValueError):
        ebpf_compile.CompileOptions(k=K, max_pool_size=1 << 16)
    with pytest.raises(ValueError, match="k must be one of"):
        ebpf_compile.CompileOptions(k=33)


def test_missing_clang_is_named(tmp_path: Path) -> None:
    with pytest.raises(EbpfCompileError, match="clang not found"):
        ebpf_compile.compile_program(ebpf_compile.CompileOptions(k=K, clang="no-such-clang"), build_root=tmp_path)


@pytest.mark.ebpf
def test_cache_holds_one_object_per_k(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Each k is built once, on first use (logged), into its own cache entry."""
    require_target("ebpf")
    with caplog.at_level(logging.INFO, logger=ebpf_compile.__name__):
        objects = {k: ebpf_compile.compile_program(ebpf_compile.CompileOptions(max_pool_size=POOL, k=k), tmp_path) for k in (K, MAX_K)}
        built = [r.getMessage() for r in caplog.records if r.getMessage().startswith("building")]
        assert [f"k = {k}," in line for line, k in zip(built, objects)] == [True, True], built
        caplog.clear()
        assert ebpf_compile.compile_program(ebpf_compile.CompileOptions(max_pool_size=POOL, k=MAX_K), tmp_path) == objects[MAX_K]
        assert not [r for r in caplog.records if r.getMessage().startswith("building")], "a cached k is not rebuilt"
    assert len({path.parent for path in objects.values()}) == 2 and all(path.is_file() for path in objects.values())
    assert objects[K].read_bytes() != objects[MAX_K].read_bytes()


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
    switch = datapath.EbpfDataPlane(bed.switch_ports, k=K, name="lifecycle", max_pool_size=POOL)
    switch.start()
    try:
        for ifname in bed.switch_ports.values():
            assert len(ingress_filters(ifname)) == 1 and "clsact" in qdisc_kinds(ifname)
        assert not datapath.PIN_ROOT.exists(), "pins are removed once the filters hold the program"
        with switch.control() as control:
            assert control.schema == maps.program_schema(K, POOL)
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
        EbpfControl(switch.map_ids, K)


KILLED_OWNER = """
import json, os, signal, sys
from switches.ebpf.switchml.datapath import EbpfDataPlane
switch = EbpfDataPlane({int(k): v for k, v in json.loads(sys.argv[1]).items()}, k=int(sys.argv[3]), name="killed",
                       max_pool_size=int(sys.argv[2]))
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
    child = subprocess.run([sys.executable, "-c", KILLED_OWNER, ports, str(POOL), str(K)], capture_output=True, text=True, cwd=params.REPO_ROOT)
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
    loader.ensure_bpffs()
    orphan = datapath.PIN_ROOT / f"{dead_pid}-crashed-0"
    orphan.mkdir(parents=True)
    switch = datapath.EbpfDataPlane(bed.switch_ports, k=K, name="sweeper", max_pool_size=POOL)
    switch.start()
    switch.stop()
    assert not orphan.exists() and not datapath.PIN_ROOT.exists()


@pytest.mark.netns
@pytest.mark.ebpf
def test_the_bpf_filesystem_and_the_pins_are_roots_alone(bed: Testbed, tmp_path: Path, monkeypatch) -> None:
    """A BPF filesystem the switch mounts is mode 0700 (the kernel's default, 1777, let a
    graded submission leave a file there that the next one read), and while it loads, its
    pin directories and pins are writable by root only."""
    mount_point = tmp_path / "bpffs"
    mount_point.mkdir()
    loader.ensure_bpffs(mount_point)
    try:
        assert mount_point.stat().st_mode & 0o777 == loader.PRIVATE  # and the sticky bit, which the kernel sets
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
    seen: dict[str, int] = {}
    real_run = loader.run

    def run_and_look(command: list[str]) -> subprocess.CompletedProcess:
        if command[:3] == ["tc", "filter", "add"] and not seen:  # loaded and pinned, not yet unpinned
            seen.update({str(path): path.lstat().st_mode & 0o7777 for path in [datapath.PIN_ROOT, *datapath.PIN_ROOT.rglob("*")]})
        return real_run(command)

    monkeypatch.setattr(loader, "run", run_and_look)
    switch = datapath.EbpfDataPlane(bed.switch_ports, k=K, name="private", max_pool_size=POOL)
    switch.start()
    switch.stop()
    assert seen[str(datapath.PIN_ROOT)] == loader.PRIVATE, seen
    assert any(name.endswith(datapath.PROGRAM) for name in seen), f"no pinned program seen: {seen}"
    assert {name: f"{mode:o}" for name, mode in seen.items() if mode & 0o077} == {}, "pins others may read or write"


@pytest.mark.netns
@pytest.mark.ebpf
def test_two_instances_keep_their_own_state(tmp_path: Path) -> None:
    """Two switches at once (two test beds): separate maps, so one's tables never show in the other."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    require_target("ebpf")
    with standalone.testbed(2) as first_bed, standalone.testbed(2) as second_bed:
        first = datapath.EbpfDataPlane(first_bed.switch_ports, k=K, name="first", max_pool_size=POOL)
        second = datapath.EbpfDataPlane(second_bed.switch_ports, k=K, name="second", max_pool_size=POOL)
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
