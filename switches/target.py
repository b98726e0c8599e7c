"""What a switch target is, said once: the descriptor each target package fills in.

Every target package describes itself with a ``SwitchTarget`` (``TARGET`` in its
``__init__.py``), and ``switches/targets.py`` lists the packages. Whatever chooses, checks, starts
or tests a target reads the descriptor instead of comparing target names, so a new target
is its own folder plus one line in that list (Pantheon's wrapper registry).

A target's data plane, started on a set of ports, is a ``DataPlane``: one object with the
same lifecycle whether a Mininet node (``switches/mininet_node.py``) or a test bed outside
Mininet (``switches/standalone.py``) runs it. Nothing here imports a target's own
dependencies (p4-utils, Mininet, clang): the descriptor reaches them only when asked.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, ContextManager, Iterator, Mapping, Protocol, Sequence

from base.lifetime import ThreadWatch
from base.plugin import resolve
from switches.control import SwitchControl


class DataPlane(Protocol):
    """A target's switch running on a set of ports (port number -> interface)."""

    name: str

    def start(self) -> None:
        """Run on the ports; returns once the control plane can connect."""

    def stop(self) -> None:
        """Take the switch off its ports; safe to call twice."""

    @property
    def running(self) -> bool: ...

    @property
    def pid(self) -> int | None:
        """The process doing the switching while it runs, whose CPU time is measured; None
        when stopped or when there is none (the eBPF switch: its work is softirq time)."""

    def control(self, command_log: Path | None = None) -> SwitchControl:
        """A control-plane connection (the caller closes it)."""

    @property
    def threads(self) -> Mapping[str, ThreadWatch]:
        """Threads of this process the switch needs while it runs, by what they are (bmv2's
        learning controller), for the run to watch like its processes; empty for most."""

    def problems(self) -> list[str]:
        """What is wrong with the running switch that no process's death shows (the eBPF
        program no longer attached to a port), asked when a job's deadline passed, before a
        rank is blamed; empty for a target whose switch is a process (watched as one)."""


Transmit = Callable[[memoryview], object]
"""A port's transmit function: takes one frame (a view the switch reuses once it returns)."""


class SimulatedSwitch(Protocol):
    """A target's data plane without ports or a clock, for the simulator (simulation/): it
    is handed each frame at the simulated time it arrives, and sends through the transmit
    function connected to each port, so that the simulated network runs the target's own
    code rather than a model of it."""

    def connect(self, port: int, transmit: Transmit) -> None:
        """Frames leaving ``port`` go to ``transmit``."""

    def receive(self, port: int, frame: bytes) -> None:
        """Run one frame that arrived on ``port`` through the switch, now."""

    def control(self, command_log: Path | None = None) -> SwitchControl:
        """Its control plane, in this process."""


StartSimulatedSwitch = Callable[..., SimulatedSwitch]
"""(*, k, max_pool_size, seed) -> a SimulatedSwitch with empty tables and registers."""


class DataPlaneStartError(RuntimeError):
    """A target's switch exited, or never became ready, while it started: what every target's
    start raises for it (with the switch's log), so that a run fails naming the switch
    whichever target it was, in one message rather than a traceback."""


@dataclass(frozen=True)
class PortQueueLimit:
    """The deepest egress queue a target's port interfaces may have, and why."""

    packets: int
    why: str


CpuReader = Callable[[], tuple[float, float]]
"""(user, system) CPU seconds a switch's work has taken so far."""


@contextlib.contextmanager
def process_cpu_meter(pid: int | None, interfaces: Sequence[str]) -> Iterator[CpuReader]:
    """The ``cpu_meter`` of a target whose switching is one process: its CPU time from /proc."""
    if pid is None:
        raise ValueError("this switch runs no process to measure")
    ticks = os.sysconf("SC_CLK_TCK")

    def cpu_seconds() -> tuple[float, float]:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) / ticks, int(fields[12]) / ticks

    yield cpu_seconds


@dataclass(frozen=True)
class Toolchain:
    """Where this machine's copy of a target's tools was found (the folders of its
    executables, of its Python modules, the environment variables they read): what a process
    that sees only the system's folders and the Python environment, with an environment of
    its own (the labs' sandbox, labs/sandbox.py), must be given to run them."""

    executables: tuple[Path, ...] = ()
    """Folders its executables were found in on PATH."""
    python: tuple[Path, ...] = ()
    """Folders its Python modules were imported from (sys.path entries: PYTHONPATH's)."""
    variables: Mapping[str, str] = field(default_factory=dict)
    """Environment variables its tools read, as this process has them."""


@dataclass(frozen=True)
class Missing:
    """What this machine lacks for a target, as data: the caller words it (``unavailable``,
    ``passed_over``), so every target's message has the same shape."""

    target: str
    problems: tuple[str, ...]
    """What ``SwitchTarget.detect`` found lacking, one item each ("simple_switch", "root (...)")."""
    refusable: bool = False
    """The kernel may refuse as well as lack (the eBPF switch's probes)."""
    remedy: str = ""
    """What to do about it, one sentence or two ("scripts/bootstrap.sh installs the tools")."""

    def __bool__(self) -> bool:
        return bool(self.problems)

    def listed(self) -> str:
        """The problems in one phrase: names by commas; reasons (what a kernel refuses), or items
        with commas of their own, by semicolons."""
        return ("; " if self.refusable or any("," in problem for problem in self.problems) else ", ").join(self.problems)

    def unavailable(self) -> str:
        """Why an explicit choice of the target cannot run."""
        lacks = "lacks or refuses" if self.refusable else "lacks"
        return f"switch target '{self.target}' needs {self.listed()}, which this machine {lacks}.{' ' + self.remedy if self.remedy else ''}"

    def passed_over(self) -> str:
        """Why ``auto`` passed the target over (its log line)."""
        return f"{self.target}{'' if self.refusable else ' lacks'}: {self.listed()}"


@dataclass(frozen=True)
class SwitchTarget:
    """One switch target: what it needs, how it runs, what it supports.

    A base class, as Mininet's ``Switch`` and p4app-switchML's ``Backend`` are: a target's
    package subclasses it, gives its facts as fields (its Mininet node class as a
    "module:attribute" reference) and overrides the methods where its behaviour differs from
    the defaults below (``data_plane`` and ``describe_build`` it must give). The methods import the target's own modules when
    called, never when the descriptor is built."""

    name: str
    """What ``--switch`` and ``switch.target`` call it; also the pytest marker of its tests."""
    needs: str
    """What it needs beyond this repository, in words (test markers, documentation)."""
    auto_preference: int
    """``auto`` takes the lowest that can run here."""
    node: str = ""
    """"module:attribute" of its Mininet switch class, imported only when the target is chosen."""
    remedy: str = ""
    """What to do when it cannot run here, one sentence or two (``Missing.remedy``)."""
    refusable: bool = False
    """The kernel may refuse it as well as lack what it needs (``Missing.refusable``)."""
    program: str = "program"
    """How a refused k names what is built per k ("P4 program")."""
    protocols: frozenset[str] = frozenset()
    """The in-network aggregation protocols it has a data plane for (``methods.AGGREGATIONS``'
    names); a config whose methods run another one on it is refused as it loads."""
    programs: Mapping[str, str] = field(default_factory=dict)
    """Protocol -> "module:attribute" of its program on this target, one line each, in the
    target's own terms (the embedded switch: its pipeline class; bmv2: what compiles its P4
    program; eBPF: its data plane). The first is what a switch runs when no job needs a
    protocol: every program forwards ordinary traffic."""
    k_choices: tuple[int, ...] | None = None
    """The k (elements per packet) it builds its program for, each on first use; None: any
    k a packet can carry (the embedded switch)."""
    max_pool_size: int | None = None
    """The most register cells per shadow set it can have; None: any the config allows."""
    delays_frames: bool = False
    """It can delay frames itself (a delay line), for kernels without netem; its node then
    takes the links' delay as ``link_delay_ms``."""
    options: frozenset[str] = field(default_factory=frozenset)
    """Keywords a caller may give its ``data_plane`` beyond the common ones (seed, profile, ...)."""
    root_to_tell: str | None = None
    """What ``detect`` reports in a process that is not root, for a target only root can ask
    the kernel about (the eBPF switch's probes); None for a target anyone can check."""
    link_rates: Mapping[int, float] = field(default_factory=dict)
    """k -> the link rate (Mbit/s) at which the main job (8 workers, every method) keeps up
    on this target with margin on a 2-core machine: what a config's ``topology.link.bw_mbps:
    target`` runs at (benchmarks/README.md, "The main job" and "Emulation capacity", has the measurements).
    A k without an entry has no measured rate: such a config must give a number."""

    simulated: ClassVar[StartSimulatedSwitch | None] = None
    """Its data plane as a ``SimulatedSwitch``, for ``run_experiment.py --simulate``; None: a
    target the simulator cannot run (its data plane is compiled code bound to real ports). A
    target that has one defines it as a method ``simulated(*, k, max_pool_size, seed)``."""

    def node_class(self) -> type:
        """Its Mininet switch class (``node``), imported now."""
        return resolve(self.node)

    def data_plane(self, ports: Mapping[int, str], log_dir: Path, *, name: str, k: int, max_pool_size: int,
                   protocol: str | None = None, **options: Any) -> DataPlane:
        """Its switch on a set of ports running ``protocol``'s program (None: ``default_protocol``),
        not yet started, for its Mininet node and for test beds outside Mininet."""
        raise NotImplementedError(f"switch target {self.name} gives no data plane")

    @property
    def default_protocol(self) -> str:
        """The protocol whose program a switch runs when no job asks for one (the first of ``programs``)."""
        if not self.programs:
            raise ValueError(f"switch target {self.name} declares no program (SwitchTarget.programs)")
        return next(iter(self.programs))

    def program_of(self, protocol: str | None) -> str:
        """The "module:attribute" of ``protocol``'s program here (None: ``default_protocol``'s);
        a ValueError naming the protocols it has one for."""
        chosen = self.default_protocol if protocol is None else protocol
        try:
            return self.programs[chosen]
        except KeyError:
            raise ValueError(f"the {self.name} switch has no program for {chosen} (it runs {', '.join(self.programs)})") from None

    def describe_build(self) -> str:
        """Which switch binary runs (benchmarks record it: builds differ several-fold)."""
        raise NotImplementedError(f"switch target {self.name} does not describe its build")

    def detect(self) -> Sequence[str]:
        """What this machine lacks or refuses for it, one item each; empty when it can run (the default)."""
        return []

    def port_queue_limit(self) -> PortQueueLimit | None:
        """The deepest queue (``queue_packets``) the qdisc of one of its ports may have before
        the switch suffers for it: the network caps the switch's side of every link at it and
        records the cap (network.json's links). None (the default): any depth."""
        return None

    def remove_leftovers(self) -> list[str]:
        """Remove what its switches of killed runs left that no run's record names (the embedded
        switch's socket folders, the eBPF switch's pins of a loader killed while loading); what
        was removed, in words (``python -m network.cleanup`` asks every target). The default:
        nothing is left behind its processes and interfaces, which every run removes."""
        return []

    def cpu_meter(self, pid: int | None, interfaces: Sequence[str]) -> ContextManager[CpuReader]:
        """While open, what its switching has cost in CPU so far (benchmarks/switchml/switch_throughput.py):
        by default its data plane's process's CPU time (the eBPF switch: its program's run time)."""
        return process_cpu_meter(pid, interfaces)

    def toolchain(self) -> Toolchain:
        """Where its tools were found on this machine; the default: none, its tools are the project's own code."""
        return Toolchain()

    def tool_versions(self) -> Mapping[str, str | None]:
        """Tool name -> its version (base.tool_version.first_line; None: unknown) for the tools
        its data plane is built and run with: a run's provenance records them. Empty (the
        default) for a target that is the project's own code."""
        return {}

    def link_mbps(self, k: int) -> float | None:
        """The measured rate for k (``link_rates``), None where there is none."""
        return self.link_rates.get(k)

    def missing(self) -> Missing:
        """What this machine lacks for it (falsy when nothing: it can run)."""
        return Missing(self.name, tuple(self.detect()), self.refusable, self.remedy)

    def undecided(self, missing: Missing) -> bool:
        """Whether ``missing`` (this process's) leaves open whether a root run could use the
        target: root is the only thing missing, and only root can probe it."""
        return self.root_to_tell is not None and os.geteuid() != 0 and missing.problems == (self.root_to_tell,)

    def builds(self, k: int) -> bool:
        """Whether the target can build its program for k elements per packet."""
        return self.k_choices is None or k in self.k_choices

    def check_k(self, k: int) -> None:
        """Refuse a k the target cannot build its program for (ValueError)."""
        if not self.builds(k):
            choices = ", ".join(map(str, self.k_choices))
            raise ValueError(f"the {self.name} switch's {self.program} is built for k = {choices}; got k = {k}")

    def start_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """The subset of ``options`` this target's data plane takes."""
        return {key: value for key, value in options.items() if key in self.options}
