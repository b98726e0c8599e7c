"""Fixtures for packet-level switch tests: namespaces, a switch target, fresh state per test.

``target`` is parametrised over every switch target (switches/targets.py's registry), each
started on a Testbed's switch ports by switches/standalone.py: a new switch target joins every
packet-level case by being registered there. It runs at k = DEFAULT_TESTED_K; a case marked
``every_k`` (the element path: sums, malformed lengths, truncation, partial sums) runs at
every k of TESTED_K on every target that builds it.
The switch runs for a whole module; ``switch`` resets its state before every test
(registers, counters, drop simulator, learned L2 entries) so tests stay independent and
fast. Hosts 0 and 1 are the workers of job JOB; host 2 is a bystander; hosts 3 and 4 are
the workers of job OTHER_JOB, which shares the switch (the two jobs split its slots).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ContextManager, Iterator

import pytest

from experiments.calibration.record import FILE_VARIABLE
from protocol import params
from protocol.switchml import params as switchml_params
from switches import standalone
from switches.switchml import programming
from switches.control import SwitchControl
from switches.standalone import run_switch
from switches.targets import REGISTRY
from base.netns import Testbed
from tests.switch_io import SwitchPorts

os.environ[FILE_VARIABLE] = ""
"""The tests expect the shipped link rates whatever this machine has calibrated
(results/calibration.yaml); tests/test_calibration.py names its own files."""

JOB = 7
OTHER_JOB = 9
N_HOSTS = 5
N_WORKERS = 2
JOB_HOSTS = {JOB: (0, 1), OTHER_JOB: (3, 4)}
"""Each job's workers (host indices, in rank order)."""
JOB_POOL = switchml_params.MAX_POOL_SIZE // 2
"""Slots per job: JOB owns cells 0..JOB_POOL-1 of each shadow set, OTHER_JOB the rest."""

TESTED_K = (32, 256)
"""The k the packet tests run at: the classroom size and the reference's (the largest)."""
DEFAULT_TESTED_K = 32
"""The k of a case that does not depend on it (forwarding, tables, control-plane errors)."""

StartTarget = Callable[[Testbed, Path, int], ContextManager[SwitchControl]]


def required_variable(target: str) -> str:
    """The environment variable that, set to 1, makes a skip of ``target``'s tests a failure:
    .ci/run sets SWITCHML_REQUIRE_BMV2 where the prebuilt toolchain is installed and
    SWITCHML_REQUIRE_EBPF where its bootstrap installs clang and bpftool on a kernel that
    takes the program, so a broken set-up cannot pass as 'skipped'."""
    return f"SWITCHML_REQUIRE_{target.upper()}"


def require_target(target: str) -> None:
    """Skip the calling test where ``target`` cannot run here, saying why; fail instead
    where its ``required_variable`` is 1."""
    problems = REGISTRY[target].missing()
    if not problems:
        return
    reason = f"{target} cannot run here (missing or refused: {'; '.join(problems.problems)})"
    variable = required_variable(target)
    if os.environ.get(variable) == "1":
        pytest.fail(f"{reason}, but {variable}=1 says it must run here")
    pytest.skip(reason)


def require_torch() -> None:
    """Skip the calling test where PyTorch (the optional extra) is absent, saying how to
    install it; fail instead where SWITCHML_REQUIRE_TORCH is 1 (.ci/run installs it)."""
    from base.optional import torch_unavailable

    reason = torch_unavailable()
    if reason is None:
        return
    if os.environ.get("SWITCHML_REQUIRE_TORCH") == "1":
        pytest.fail(f"the torch tests {reason}, but SWITCHML_REQUIRE_TORCH=1 says it must run here")
    pytest.skip(f"PyTorch: {reason}")


def require_cluster() -> None:
    """Skip the calling test where this machine cannot have a second server (no sshd, not
    root, no namespaces: tests/cluster_server.py says which), saying why; fail instead where
    SWITCHML_REQUIRE_CLUSTER is 1 (.ci/run installs openssh-server and starts the server)."""
    from tests import cluster_server

    problems = cluster_server.missing()
    if not problems:
        return
    reason = f"no second server here (missing: {', '.join(problems)})"
    if os.environ.get("SWITCHML_REQUIRE_CLUSTER") == "1":
        pytest.fail(f"{reason}, but SWITCHML_REQUIRE_CLUSTER=1 says the cluster tests must run here")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def cluster_server() -> Iterator[Any]:
    """The second server (tests/cluster_server.py): the one CI started, else one of this
    session's own, removed at its end."""
    require_cluster()
    from tests import cluster_server as second

    started = second.running()
    if started is not None:
        second.sync()  # the run's preflight wants this commit there
        yield started
        return
    server = second.up()
    try:
        yield server
    finally:
        second.down()


def pytest_configure(config: pytest.Config) -> None:
    """One marker per switch target, so that ``pytest -m bmv2`` (``-m ebpf``) selects every
    case that runs that target (and ``-m 'not bmv2'`` none). Refuse ``-n`` where pytest-xdist
    would silently drop the test groups."""
    if config.getoption("numprocesses", None) and _xdist_drops_groups():
        raise pytest.UsageError(f"pytest {pytest.__version__} with pytest-xdist {importlib.metadata.version('pytest-xdist')} runs "
                                "grouped tests in any worker (pytest-xdist issue 1386): install pytest below 9.2 "
                                "(pyproject.toml's test extra) or run without -n")
    for name, described in REGISTRY.items():
        config.addinivalue_line("markers", f"{name}: runs the {name} switch target (needs {described.needs}; skipped where absent)")
    config.addinivalue_line("markers", f"every_k: a packet test that runs at every k of {TESTED_K}, not only at {DEFAULT_TESTED_K}")
    config.addinivalue_line("markers", "bench: a module of packet tests on a standalone test bed (ON_THE_BENCH: its embedded and bmv2 cases run beside the network tests with -n)")


def _xdist_drops_groups() -> bool:
    """Whether pytest is 9.2 or later and pytest-xdist 3.8 or earlier: there xdist marks a
    grouped test by a suffix of its node id that pytest no longer lets a plugin change, and
    every test would run in any worker, two networks at once (pytest-xdist issue 1386)."""
    def major_minor(version: str) -> tuple[int, ...]:
        return tuple(int(part) for part in version.split(".")[:2])

    return major_minor(pytest.__version__) >= (9, 2) and major_minor(importlib.metadata.version("pytest-xdist")) <= (3, 8)


MACHINE_GROUP = "machine"
"""The pytest-xdist group of every test not marked ``parallel_safe`` nor given a group of its
own: the tests that build networks, start switches, bind fixed ports or search the machine's
processes run one after another in one worker, as in a run without xdist."""


IN_SANDBOX_GROUP = pytest.mark.xdist_group("sandbox")
"""The lab grader's tests: each submission in a sandbox of its own namespaces (its network,
its /run and network lock, another user), so they run beside MACHINE_GROUP, but one after
another among themselves (they look for the sandbox user's processes)."""

ON_LOOPBACK_GROUP = pytest.mark.xdist_group("loopback")
"""Clients, relays and DDP ranks on this machine's loopback addresses, some on fixed ports:
one after another among themselves, beside MACHINE_GROUP (whose networks are namespaces)."""

ON_THE_BENCH = pytest.mark.bench
"""A module of packet tests on a standalone test bed (switches/standalone.py: namespaces
named after the test's pid, a switch process on their veths, no network lock). Its embedded
and bmv2 cases run in BENCH_GROUP, beside MACHINE_GROUP (a standalone simple_switch takes a
Thrift port the kernel picks); its eBPF cases stay in MACHINE_GROUP, where a test checks that
the eBPF switches' pin folder is gone once its switch stopped."""

BENCH_TARGETS = frozenset({"embedded", "bmv2"})

BENCH_GROUP = "bench"


def _group(item: pytest.Item) -> str | None:
    """The pytest-xdist group ``item`` runs in, or None (parallel_safe: any worker)."""
    if item.get_closest_marker("parallel_safe") is not None:
        return None
    if item.get_closest_marker("bench") is not None:
        targets = {name for name in REGISTRY if item.get_closest_marker(name) is not None}
        return BENCH_GROUP if targets and targets <= BENCH_TARGETS else MACHINE_GROUP
    return MACHINE_GROUP


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own hook reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put every test into its group (``--dist loadgroup``, pyproject.toml): MACHINE_GROUP
    unless its module declares otherwise (docs/testing.md)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None and (group := _group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))


def closed_to_others(path: Path) -> Path | None:
    """The first folder at or above ``path`` that users other than its owner cannot search
    (e.g. mktemp -d's mode 0700 folder holding a checkout), or None: a test that runs
    something as another user needs what it runs to be reachable."""
    return next((folder for folder in [path, *path.parents] if folder.is_dir() and not os.stat(folder).st_mode & 0o001), None)


def require_track_machine(needs: tuple[str, ...]) -> None:
    """What a lab track's graded tests need (lab.yaml's needs): bmv2 (or fail where CI says
    it must run), root for namespaces and Mininet. For tests that grade a lab."""
    if "bmv2" in needs:
        require_target("bmv2")
    if {"netns", "mininet"} & set(needs) and os.geteuid() != 0:
        pytest.skip("the graded tests create network namespaces: root only")


@contextlib.contextmanager
def _start(target: str, testbed: Testbed, log_dir: Path, k: int) -> Iterator[SwitchControl]:
    """The target running on the test bed's switch ports at k (bmv2: p4/switchml.p4, compiled
    for k, cached)."""
    require_target(target)
    options = REGISTRY[target].start_options({"seed": 1})
    with run_switch(target, testbed.switch_ports, log_dir, name=f"{target}-packet-tests", k=k,
                    max_pool_size=switchml_params.MAX_POOL_SIZE, command_log=log_dir / "commands.txt", **options) as running:
        yield running.control


TARGETS: dict[str, StartTarget] = {name: functools.partial(_start, name) for name in REGISTRY}


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
    with standalone.testbed(N_HOSTS) as bed, contextlib.ExitStack() as sinks:
        for host in bed.hosts:
            sinks.enter_context(host.udp_socket(switchml_params.WORKER_UDP_PORT))
        yield bed


@dataclass
class SwitchTarget:
    name: str
    control: SwitchControl
    testbed: Testbed
    k: int


TARGET_MARKS = {name: [getattr(pytest.mark, name)] for name in REGISTRY}
"""Each target's cases carry its marker (``pytest_configure``)."""


def target_params(ks: tuple[int, ...]) -> list[Any]:
    """(target, k) for every target and every k of ``ks`` it builds, k by k, so that the
    cases of one k share a switch per module whichever k the others run at."""
    return [
        pytest.param((name, k), marks=TARGET_MARKS[name], id=f"{name}-k{k}")
        for k in ks for name in sorted(TARGETS)
        if REGISTRY[name].builds(k)
    ]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise the ``target`` fixture (this file's or a module's own) over the targets at
    DEFAULT_TESTED_K, or at every k of TESTED_K for a case marked ``every_k``; a test that
    parametrises ``target`` itself (test_switch_differential.py) is left alone."""
    if "target" not in metafunc.fixturenames:
        return
    if any("target" in marker.args[0] for marker in metafunc.definition.iter_markers("parametrize")):
        return
    ks = TESTED_K if metafunc.definition.get_closest_marker("every_k") else (DEFAULT_TESTED_K,)
    metafunc.parametrize("target", target_params(ks), indirect=True, scope="module")


@pytest.fixture(scope="module")
def target(request: pytest.FixtureRequest, testbed: Testbed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SwitchTarget]:
    """A switch target at k (``request.param``: pytest_generate_tests) on the test bed,
    programmed for jobs JOB and OTHER_JOB (JOB_HOSTS), and answering ARP and ping for the
    switch's virtual address."""
    name, k = request.param
    log_dir = tmp_path_factory.mktemp(f"switch-{name}-k{k}")
    with TARGETS[name](testbed, log_dir, k) as control:
        programming.program_forwarding(control, list(testbed.switch_ports), {})
        programming.program_jobs(control, job_programs(testbed))
        programming.program_switch_address(control, params.SWITCH_MAC, params.SWITCH_IPV4)
        yield SwitchTarget(name, control, testbed, k)


def job_programs(testbed: Testbed) -> list[programming.JobProgram]:
    """JOB and OTHER_JOB, each with JOB_POOL slots, as the control plane admits them."""
    requests = [
        programming.JobRequest(job, [programming.WorkerPort(rank, testbed.hosts[h].switch_port, testbed.hosts[h].mac, testbed.hosts[h].ipv4)
                                     for rank, h in enumerate(hosts)], JOB_POOL)
        for job, hosts in JOB_HOSTS.items()
    ]
    return programming.admit_jobs(requests, switchml_params.MAX_POOL_SIZE)


@dataclass
class SwitchUnderTest:
    """What a test drives: the control plane, and raw sockets on every host."""

    control: SwitchControl
    ports: SwitchPorts
    testbed: Testbed
    k: int
    """Elements per packet the switch runs at."""

    def counters(self) -> dict[str, int]:
        return programming.read_event_counters(self.control)


@pytest.fixture
def switch(target: SwitchTarget) -> Iterator[SwitchUnderTest]:
    control = target.control
    programming.reset_aggregation_state(control, target.k)
    programming.reset_event_counters(control)
    programming.set_drop_probability(control, 0.0, 0.0)
    for table in (programming.L2_TABLE, programming.L2_LEARN_TABLE):
        control.table_clear(table)
    ports = SwitchPorts(target.testbed)
    try:
        yield SwitchUnderTest(control, ports, target.testbed, target.k)
    finally:
        ports.close()
