"""The bmv2 target: compile caching, p4-utils error handling, simple_switch lifecycle.

The first three parts use stand-ins (a fake p4c, a fake p4utils module, a fake
simple_switch) so they run everywhere; the last part runs the real p4c and simple_switch
and skips where bmv2 is not installed (use the Vagrant VM).
"""

from __future__ import annotations

import json
import shutil
import socket
import stat
import sys
import textwrap
import types
from functools import wraps
from pathlib import Path
from typing import Any, Callable

import pytest

from protocol.switchml import params as switchml_params
from switches import drop_simulator
from switches.switchml import programming
from switches.bmv2 import compile as p4compile
from switches.bmv2.switchml.program import PROGRAM
from switches.bmv2.control import THRIFT_TIMEOUT_S
from switches.bmv2.process import Bmv2Process, Bmv2StartError, thrift_answers
from switches.control import ControlPlaneError
from switches.embedded.switchml.pipeline import SwitchMLPipeline
from tests.conftest import require_target

K = switchml_params.P4_SOURCE_K
"""The k of p4/switchml/include's generated copies: the checked-in program, and the quickest build."""

def executable(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body).lstrip())
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


# --------------------------------------------------------------------------------------
# compile.py with a fake p4c


@pytest.fixture
def fake_p4c(tmp_path: Path) -> Path:
    """A p4c that records each call and writes switchml.json into its -o directory."""
    return executable(
        tmp_path / "p4c",
        f"""
        #!{sys.executable}
        import pathlib, sys
        args = sys.argv[1:]
        with open({str(tmp_path / "calls")!r}, "a") as f:
            f.write(" ".join(args) + "\\n")
        out = pathlib.Path(args[args.index("-o") + 1])
        (out / "switchml.json").write_text('{{"program": "switchml.p4"}}')
        """,
    )


def test_compile_runs_p4c_once_per_options(tmp_path: Path, fake_p4c: Path) -> None:
    options = p4compile.CompileOptions(program=PROGRAM, k=K, max_pool_size=64, p4c=str(fake_p4c))
    first = p4compile.compile_p4(options, build_root=tmp_path / "build")
    again = p4compile.compile_p4(options, build_root=tmp_path / "build")
    other = p4compile.compile_p4(
        p4compile.CompileOptions(program=PROGRAM, k=K, max_pool_size=128, p4c=str(fake_p4c)), build_root=tmp_path / "build"
    )
    calls = (tmp_path / "calls").read_text().splitlines()
    assert first == again != other
    assert first.exists() and other.exists()
    assert len(calls) == 2
    assert "--target bmv2 --arch v1model -I " in calls[0]
    assert "-DSWITCHML_MAX_POOL_SIZE=64" in calls[0] and calls[0].endswith("p4/switchml.p4")
    assert not [p for p in (tmp_path / "build").iterdir() if p.name.startswith(".")], "staging dir left behind"


def test_failure_shows_compiler_output_verbatim(tmp_path: Path) -> None:
    message = "switchml.p4(42): [--Werror=type-error] error: x: no such field"
    failing = executable(
        tmp_path / "p4c",
        f"""
        #!/bin/sh
        echo '{message}' >&2
        exit 1
        """,
    )
    with pytest.raises(p4compile.P4CompileError) as error:
        p4compile.compile_p4(p4compile.CompileOptions(program=PROGRAM, k=K, max_pool_size=switchml_params.MAX_POOL_SIZE, p4c=str(failing)), build_root=tmp_path / "build")
    assert message in str(error.value)
    assert str(error.value).splitlines()[0] == f"p4c: {message} (exit 1)", "a test report's one line names file, line and error"
    assert list((tmp_path / "build").iterdir()) == []


def test_build_hash_follows_sources_and_options(tmp_path: Path) -> None:
    sources = tmp_path / "p4"
    shutil.copytree(PROGRAM.sources, sources, ignore=shutil.ignore_patterns("__pycache__"))
    options = p4compile.CompileOptions(program=PROGRAM, k=K, max_pool_size=switchml_params.MAX_POOL_SIZE)
    before = p4compile.build_hash(options, sources)
    assert p4compile.build_hash(options, sources) == before
    assert p4compile.build_hash(p4compile.CompileOptions(program=PROGRAM, k=K, max_pool_size=8), sources) != before
    ingress = sources / "include" / "ingress.p4"
    ingress.write_text(ingress.read_text() + "\n")
    assert p4compile.build_hash(options, sources) != before


def test_pool_size_must_fit_the_slot_field() -> None:
    with pytest.raises(ValueError):
        p4compile.CompileOptions(program=PROGRAM, k=K, max_pool_size=0)
    with pytest.raises(ValueError):
        p4compile.CompileOptions(program=PROGRAM, k=K, max_pool_size=1 << 16)


# --------------------------------------------------------------------------------------
# control.py against a stand-in for p4-utils


class FakeUInError(Exception):
    """p4utils.utils.thrift_API.UIn_Error."""


def cli_style(method: Callable[..., Any]) -> Callable[..., Any]:
    """p4-utils' handle_bad_input: print the error, return None."""

    @wraps(method)
    def handle(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except FakeUInError as error:
            print("Error:", error)
            return None

    return handle


def fake_switch_info() -> types.SimpleNamespace:
    """p4-utils' view of a program with the worker table and a 3-cell event counter."""
    set_worker = types.SimpleNamespace(runtime_data=[("rank", 8), ("job_id", 16), ("num_workers", 8), ("mcast_grp", 16)])
    l2_forward = types.SimpleNamespace(runtime_data=[("port", 9)])
    worker_table = types.SimpleNamespace(
        key=[("standard_metadata.ingress_port", "exact", 9), ("hdr.ipv4.srcAddr", "exact", 32)],
        actions={"SwitchMLIngress.set_worker": set_worker},
    )
    l2_table = types.SimpleNamespace(key=[("hdr.ethernet.dstAddr", "exact", 48)], actions={"SwitchMLIngress.l2_forward": l2_forward})
    return types.SimpleNamespace(
        tables={programming.WORKER_TABLE: worker_table, programming.L2_TABLE: l2_table},
        register_arrays={},
        counter_arrays={programming.EVENT_COUNTER: types.SimpleNamespace(size=3)},
    )


class FakeSimpleSwitchThriftAPI:
    """Answers like p4-utils: (bytes, packets) per counter cell, chatter on stdout."""

    instances: list["FakeSimpleSwitchThriftAPI"] = []

    def __init__(self, thrift_port: int, thrift_ip: str = "localhost", json_path: str | None = None) -> None:
        self.switch_info = fake_switch_info()
        self.calls: list[tuple[Any, ...]] = []
        self.client = types.SimpleNamespace(
            _iprot=types.SimpleNamespace(trans=types.SimpleNamespace(close=lambda: self.calls.append(("close",)))),
            bm_get_config=lambda: json.dumps({"pipelines": [{"tables": [{"name": name, "max_size": 4096} for name in self.switch_info.tables]}]}),
        )
        FakeSimpleSwitchThriftAPI.instances.append(self)

    def get_res(self, type_name: str, name: str, res_type: str) -> Any:
        if name != "SwitchMLIngress.event_counter":
            raise FakeUInError(f"Invalid {type_name} name ({name})")
        return types.SimpleNamespace(size=3)

    @cli_style
    def table_add(self, table: str, action: str, keys: list[str], action_params: list[str], prio: int = 0) -> int:
        print("Adding entry to exact match table", table)
        if table == programming.L2_TABLE:
            raise FakeUInError(f"Table {table} is full")
        self.calls.append(("table_add", table, action, keys, action_params))
        return 7

    @cli_style
    def counter_read(self, counter: str, index: int) -> tuple[int, int]:
        return (100 * (index + 1), index + 1)


@pytest.fixture
def fake_p4utils(monkeypatch: pytest.MonkeyPatch) -> type[FakeSimpleSwitchThriftAPI]:
    thrift_api = types.ModuleType("p4utils.utils.thrift_API")
    thrift_api.UIn_Error = FakeUInError  # type: ignore[attr-defined]
    thrift_api.ResType = types.SimpleNamespace(counter_array="counter_array")  # type: ignore[attr-defined]
    sswitch = types.ModuleType("p4utils.utils.sswitch_thrift_API")
    sswitch.SimpleSwitchThriftAPI = FakeSimpleSwitchThriftAPI  # type: ignore[attr-defined]
    thrift = types.ModuleType("thrift.Thrift")
    thrift.TException = type("TException", (Exception,), {})  # type: ignore[attr-defined]
    for name, module in {
        "p4utils": types.ModuleType("p4utils"),
        "p4utils.utils": types.ModuleType("p4utils.utils"),
        "p4utils.utils.thrift_API": thrift_api,
        "p4utils.utils.sswitch_thrift_API": sswitch,
        "thrift": types.ModuleType("thrift"),
        "thrift.Thrift": thrift,
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    FakeSimpleSwitchThriftAPI.instances.clear()
    return FakeSimpleSwitchThriftAPI


def test_control_passes_values_as_strings(fake_p4utils: type[FakeSimpleSwitchThriftAPI], capsys: pytest.CaptureFixture[str]) -> None:
    from switches.bmv2.control import Bmv2Control

    with Bmv2Control(9090) as control:
        handle = control.table_add(programming.WORKER_TABLE, "set_worker", [1, "10.0.0.1"], [0, 1, 2, "0x2"])
    api = fake_p4utils.instances[0]
    assert handle == 7
    assert api.calls[0] == ("table_add", programming.WORKER_TABLE, "set_worker", ["1", "167772161"], ["0", "1", "2", "2"])
    assert api.calls[-1] == ("close",)
    assert capsys.readouterr().out == "", "p4-utils chatter must go to the log, not stdout"


def test_control_raises_what_p4utils_would_only_print(fake_p4utils: type[FakeSimpleSwitchThriftAPI]) -> None:
    from switches.bmv2.control import Bmv2Control

    control = Bmv2Control(9090)
    with pytest.raises(ControlPlaneError, match="is full"):
        control.table_add(programming.L2_TABLE, "l2_forward", ["02:00:00:00:00:01"], [3])


def test_control_checks_calls_against_the_program_before_bmv2_sees_them(fake_p4utils: type[FakeSimpleSwitchThriftAPI]) -> None:
    """bmv2 would store port 512 as port 0; the contract refuses it, like every other target."""
    from switches.bmv2.control import Bmv2Control

    control = Bmv2Control(9090)
    with pytest.raises(ControlPlaneError, match="unknown action 'l2_forward'"):
        control.table_add(programming.WORKER_TABLE, "l2_forward", [1, "10.0.0.1"], [3])
    with pytest.raises(ControlPlaneError, match="does not fit bit<9>"):
        control.table_add(programming.WORKER_TABLE, "set_worker", [512, "10.0.0.1"], [0, 1, 2, 2])
    with pytest.raises(ControlPlaneError, match="unknown counter"):
        control.counter_read(programming.EGRESS_COUNTER)
    assert fake_p4utils.instances[0].calls == []


def test_capturing_p4utils_printing_from_two_threads_restores_stdout() -> None:
    """The runner and a learning controller call p4-utils at once: sys.stdout must come back."""
    import contextlib
    import io
    import threading

    from switches.bmv2.control import STDOUT_CAPTURE

    def calls() -> None:
        for _ in range(5000):
            with STDOUT_CAPTURE, contextlib.redirect_stdout(io.StringIO()):
                print("p4-utils chatter")

    threads = [threading.Thread(target=calls) for _ in range(2)]
    stdout = sys.stdout
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sys.stdout is stdout


def test_counter_read_is_packets_then_bytes_for_every_cell(fake_p4utils: type[FakeSimpleSwitchThriftAPI]) -> None:
    from switches.bmv2.control import Bmv2Control

    assert Bmv2Control(9090).counter_read(programming.EVENT_COUNTER) == [(1, 100), (2, 200), (3, 300)]


# --------------------------------------------------------------------------------------
# process.py with a fake simple_switch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fake_switch(tmp_path: Path, ignore_sigterm: bool = False, fail: bool = False) -> Path:
    """Listens on --thrift-port like simple_switch (or exits at once when ``fail``)."""
    return executable(
        tmp_path / "simple_switch",
        f"""
        #!{sys.executable}
        import signal, socket, sys, time
        print("fake simple_switch", " ".join(sys.argv[1:]), flush=True)
        if {fail!r}:
            print("Error: could not open interface", flush=True)
            sys.exit(3)
        if {ignore_sigterm!r}:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        server = socket.socket()
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", int(sys.argv[sys.argv.index("--thrift-port") + 1])))
        server.listen()
        while True:
            time.sleep(1)
        """,
    )


def process(tmp_path: Path, switch: Path, port: int) -> Bmv2Process:
    return Bmv2Process(
        name="s1",
        json_path=tmp_path / "switchml.json",
        interfaces={2: "s1-eth2", 1: "s1-eth1"},
        thrift_port=port,
        device_id=4,
        log_dir=tmp_path / "logs",
        executable=str(switch),
        learning=False,
    )


def test_process_starts_answers_and_stops(tmp_path: Path) -> None:
    port = free_port()
    bmv2 = process(tmp_path, fake_switch(tmp_path), port)
    assert bmv2.command()[1:5] == ["-i", "1@s1-eth1", "-i", "2@s1-eth2"]
    bmv2.start()
    try:
        assert bmv2.running and thrift_answers(port)
        assert "--thrift-port" in bmv2.log_path.read_text() and "--device-id 4" in bmv2.log_path.read_text()
    finally:
        bmv2.stop()
    assert not bmv2.running


def test_process_killed_when_it_ignores_terminate(tmp_path: Path) -> None:
    bmv2 = process(tmp_path, fake_switch(tmp_path, ignore_sigterm=True), free_port())
    bmv2.start()
    bmv2.stop(timeout_s=0.5)
    assert not bmv2.running


def test_process_that_exits_reports_its_log(tmp_path: Path) -> None:
    bmv2 = process(tmp_path, fake_switch(tmp_path, fail=True), free_port())
    with pytest.raises(Bmv2StartError, match="exited with 3(.|\n)*could not open interface"):
        bmv2.start()
    assert not bmv2.running


def test_process_refuses_a_busy_thrift_port(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        bmv2 = process(tmp_path, fake_switch(tmp_path), busy.getsockname()[1])
        with pytest.raises(Bmv2StartError, match="already in use"):
            bmv2.start()


# --------------------------------------------------------------------------------------
# The real thing (in the Vagrant VM)

@pytest.fixture(scope="module")
def compiled_json() -> Path:
    require_target("bmv2")
    return p4compile.compile_p4(p4compile.CompileOptions(program=PROGRAM, k=K, max_pool_size=16))


@pytest.mark.bmv2
def test_p4c_compiles_the_program(compiled_json: Path) -> None:
    program = json.loads(compiled_json.read_text())
    registers = {r["name"]: r["size"] for r in program["register_arrays"]}
    assert registers[programming.BITMAP_REGISTER] == 2 * 16
    assert set(programming.aggregation_registers(K)) <= set(registers)


@pytest.mark.bmv2
def test_programming_a_running_simple_switch(tmp_path: Path, compiled_json: Path) -> None:
    from switches.bmv2.control import Bmv2Control

    bmv2 = Bmv2Process(
        name="s1", json_path=compiled_json, interfaces={}, thrift_port=free_port(), device_id=90, log_dir=tmp_path
    )
    bmv2.start()
    try:
        with Bmv2Control(bmv2.thrift_port, json_path=compiled_json, command_log=tmp_path / "commands.txt") as control:
            workers = [
                programming.WorkerPort(rank=r, switch_port=r + 1, mac=f"02:00:00:00:00:{r + 1:02x}", ipv4=f"10.0.0.{r + 1}")
                for r in range(2)
            ]
            programming.program_forwarding(control, [1, 2], {w.mac: w.switch_port for w in workers})
            programming.program_aggregation(control, programming.JobProgram(job_id=1, workers=workers))
            sizes = {name: table.size for name, table in control.schema.tables.items()}
            assert sizes == {name: table.size for name, table in SwitchMLPipeline(K, 16).schema().tables.items()}
            programming.set_drop_probability(control, 0.5, 0.0)
            assert control.register_read(programming.INGRESS_DROP_THRESHOLD, 0) == drop_simulator.probability_threshold(0.5)
            control.register_write(programming.BITMAP_REGISTER, 3, 0b11)
            assert control.register_read(programming.BITMAP_REGISTER)[3] == 0b11  # type: ignore[index]
            programming.reset_aggregation_state(control, K)
            assert control.register_read(programming.BITMAP_REGISTER, 3) == 0
            assert programming.read_event_counters(control) == dict.fromkeys(switchml_params.EVENT_COUNTER_CELLS + switchml_params.EGRESS_EVENTS, 0)
            with pytest.raises(ControlPlaneError):
                control.table_add(programming.WORKER_TABLE, "l2_forward", [1, "10.0.0.9"], [1])
            assert control._thrift_socket()._timeout == THRIFT_TIMEOUT_S, "a hung switch must not hang the run"
        assert "table_add SwitchMLIngress.worker_table set_worker" in (tmp_path / "commands.txt").read_text()
    finally:
        bmv2.stop()


@pytest.mark.bmv2
def test_a_learning_controller_that_ends_is_watched_like_the_switch_process(tmp_path: Path, compiled_json: Path) -> None:
    """The learning controller is a thread of the runner: it ended unnoticed (bmv2 then floods
    every unicast frame), since only processes were watched. Its socket closed under it is
    what ends it here."""
    from base.lifetime import Dependencies

    bmv2 = Bmv2Process(name="s1", json_path=compiled_json, interfaces={}, thrift_port=free_port(), device_id=91, log_dir=tmp_path)
    bmv2.start()
    try:
        assert list(bmv2.threads) == ["the L2 learning controller of switch s1"]
        watched = Dependencies({"switch s1": bmv2.pid, **bmv2.threads})
        try:
            assert watched.exited(wait_s=0.5) is None
            bmv2._learner._socket.close()
            ended = watched.exited(wait_s=5)
            assert ended is not None and str(ended).startswith("the L2 learning controller of switch s1 ended with Closed"), ended
        finally:
            watched.close()
    finally:
        bmv2.stop()
    assert bmv2.threads == {}


@pytest.mark.bmv2
def test_two_switches_with_the_same_device_id_run_side_by_side(tmp_path: Path, compiled_json: Path) -> None:
    """Two testbeds (or a test during a run) on one machine: each simple_switch gets its own
    Thrift port and notification socket, so neither fails on 'Address already in use'."""
    switches = [
        Bmv2Process(name=f"s{i}", json_path=compiled_json, interfaces={}, thrift_port=free_port(), device_id=0, log_dir=tmp_path)
        for i in (1, 2)
    ]
    try:
        for bmv2 in switches:
            bmv2.start()
        assert all(bmv2.running for bmv2 in switches)
        assert len({bmv2.notifications_addr for bmv2 in switches}) == 2
        assert all(bmv2.notifications_path.exists() for bmv2 in switches)
    finally:
        for bmv2 in switches:
            bmv2.stop()
    assert not any(bmv2.notifications_path.exists() for bmv2 in switches), "notification sockets left behind"


# --------------------------------------------------------------------------------------
# learning.py: bmv2's learning notifications


def learning_message(samples: list[tuple[bytes, int, int]], topic: bytes = b"LEA|", cut: int = 0) -> bytes:
    from switches.bmv2.switchml.learning import L2_LEARN_SAMPLE, NOTIFICATION_HEADER

    header = NOTIFICATION_HEADER.pack(topic, 0, 0, 1, 42, len(samples))
    body = b"".join(L2_LEARN_SAMPLE.pack(mac, port, length) for mac, port, length in samples)
    return (header + body)[: len(header + body) - cut]


def test_learning_notification_gives_buffer_and_samples() -> None:
    from switches.bmv2.switchml.learning import parse_learning_notification

    message = learning_message([(bytes.fromhex("020000000007"), 1, 60), (bytes.fromhex("02000a000003"), 300, 1514)])
    assert parse_learning_notification(message) == ((0, 1, 42), [("02:00:00:00:00:07", 1, 60), ("02:00:0a:00:00:03", 300, 1514)])


def test_learning_ignores_other_notifications_and_refuses_cut_ones() -> None:
    from switches.bmv2.switchml.learning import parse_learning_notification

    assert parse_learning_notification(learning_message([(bytes(6), 1, 60)], topic=b"AGE|")) is None
    with pytest.raises(ValueError, match="expected 44 for 1 samples"):
        parse_learning_notification(learning_message([(bytes(6), 1, 60)], cut=3))
