"""Fixtures for packet-level switch tests: namespaces, a switch target, fresh state per test.

``target`` is parametrised over TARGETS: adding a switch target is one entry there (a
function that starts the target on a Testbed's switch ports and yields its SwitchControl).
The switch runs for a whole module; ``switch`` resets its state before every test
(registers, counters, drop simulator, learned L2 entries) so tests stay independent and
fast. Hosts 0 and 1 are the workers of job JOB; host 2 is a bystander.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ContextManager, Iterator

import pytest

from protocol import params
from switches import programming
from switches.control import SwitchControl
from switches.targets import detect_bmv2
from tests.netns_harness import Testbed
from tests.switch_io import SwitchPorts

JOB = 7
N_HOSTS = 3
N_WORKERS = 2

StartTarget = Callable[[Testbed, Path], ContextManager[SwitchControl]]

BMV2_REQUIRED = os.environ.get("SWITCHML_REQUIRE_BMV2") == "1"
"""Set by .ci/run where the prebuilt toolchain is installed: there a bmv2 test that would
skip is a failure, so a broken toolchain set-up cannot pass as 'skipped'."""


def require_bmv2() -> None:
    """Skip the calling test where bmv2 is absent (a user's machine), fail where it must run."""
    missing = detect_bmv2()
    if not missing:
        return
    reason = f"bmv2 not installed (missing: {', '.join(missing)})"
    if BMV2_REQUIRED:
        pytest.fail(f"{reason}, but SWITCHML_REQUIRE_BMV2=1 says it must run here")
    pytest.skip(reason)


@contextlib.contextmanager
def _embedded(testbed: Testbed, log_dir: Path) -> Iterator[SwitchControl]:
    from switches.embedded.launcher import embedded_switch

    with embedded_switch(testbed.switch_ports, log_dir, command_log=log_dir / "commands.txt", seed=1) as control:
        yield control


@contextlib.contextmanager
def _bmv2(testbed: Testbed, log_dir: Path) -> Iterator[SwitchControl]:
    """simple_switch running p4/switchml.p4 (compiled, cached) on the test bed's switch ports."""
    require_bmv2()
    from switches.bmv2.compile import compile_p4
    from switches.bmv2.control import Bmv2Control
    from switches.bmv2.node import THRIFT_PORT_BASE
    from switches.bmv2.process import Bmv2Process, free_tcp_port

    json_path = compile_p4()
    process = Bmv2Process(
        name="bmv2-packet-tests", json_path=json_path, interfaces=testbed.switch_ports,
        thrift_port=free_tcp_port(THRIFT_PORT_BASE), device_id=0, log_dir=log_dir,
    )
    process.start()
    try:
        with Bmv2Control(process.thrift_port, json_path=json_path, command_log=log_dir / "commands.txt") as control:
            yield control
    finally:
        process.stop()


TARGETS: dict[str, StartTarget] = {"embedded": _embedded, "bmv2": _bmv2}


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")


@pytest.fixture(scope="module")
def testbed() -> Iterator[Testbed]:
    """N_HOSTS namespaces cabled to switch ports 1..N_HOSTS, with UDP sinks on the worker port.

    The sinks keep the hosts' kernels from answering results with ICMP port-unreachable,
    which would cross the switch as ordinary traffic and disturb captures and counters.
    """
    _require_root()
    with Testbed(N_HOSTS) as bed, contextlib.ExitStack() as sinks:
        for host in bed.hosts:
            sinks.enter_context(host.udp_socket(params.WORKER_UDP_PORT))
        yield bed


@dataclass
class SwitchTarget:
    name: str
    control: SwitchControl
    testbed: Testbed


TARGET_MARKS = {"bmv2": [pytest.mark.bmv2]}
"""So that ``pytest -m bmv2`` selects every bmv2-parametrised case (and ``-m 'not bmv2'`` none)."""


@pytest.fixture(scope="module", params=[pytest.param(name, marks=TARGET_MARKS.get(name, [])) for name in sorted(TARGETS)])
def target(request: pytest.FixtureRequest, testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SwitchTarget]:
    """A switch target on the test bed, programmed for job JOB (workers: hosts 0 and 1)."""
    log_dir = tmp_path_factory.mktemp(f"switch-{request.param}")
    with TARGETS[request.param](testbed, log_dir) as control:
        programming.program_forwarding(control, list(testbed.switch_ports), {})
        programming.program_aggregation(control, job_program(testbed))
        yield SwitchTarget(request.param, control, testbed)


def job_program(testbed: Testbed) -> programming.JobProgram:
    workers = [programming.WorkerPort(h.index, h.switch_port, h.mac, h.ipv4) for h in testbed.hosts[:N_WORKERS]]
    return programming.JobProgram(JOB, workers)


@dataclass
class SwitchUnderTest:
    """What a test drives: the control plane, and raw sockets on every host."""

    control: SwitchControl
    ports: SwitchPorts
    testbed: Testbed

    def counters(self) -> dict[str, int]:
        return programming.read_event_counters(self.control)


@pytest.fixture
def switch(target: SwitchTarget) -> Iterator[SwitchUnderTest]:
    control = target.control
    programming.reset_aggregation_state(control)
    programming.reset_event_counters(control)
    programming.set_drop_probability(control, 0.0, 0.0)
    for table in (programming.L2_TABLE, programming.L2_LEARN_TABLE):
        control.table_clear(table)
    ports = SwitchPorts(target.testbed)
    try:
        yield SwitchUnderTest(control, ports, target.testbed)
    finally:
        ports.close()
