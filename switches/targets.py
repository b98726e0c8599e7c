"""The switch targets a run can use, and which one ``auto`` means on this machine.

Each target describes itself in its own package (``TARGET`` in ``switches/<name>/__init__.py``,
a ``switches.target.SwitchTarget``); ``PACKAGES`` is the only place that names them. The
``--switch`` choices, the config's checks, the tests' target lists and skip helpers and
the benchmarks all read it.

bmv2 needs programs and Python modules this machine may lack, ebpf a kernel that takes
its program, the embedded switch nothing beyond the project's own packages. ``auto``
therefore picks, in each target's ``auto_preference`` order, the first that can actually
run here, and logs which and why; asking for a target that cannot run says exactly what is
missing instead of failing mid-run.
"""

from __future__ import annotations

import importlib
import logging

from switches.target import SwitchTarget

log = logging.getLogger(__name__)

PACKAGES = (
    "switches.bmv2",
    "switches.ebpf",
    "switches.embedded",
)
"""One line per switch target: the package whose ``TARGET`` describes it."""

REGISTRY: dict[str, SwitchTarget] = {
    target.name: target
    for target in sorted((importlib.import_module(package).TARGET for package in PACKAGES), key=lambda t: t.auto_preference)
}
"""Every switch target by name, in ``auto``'s order of preference."""

AUTO = "auto"
TARGETS = (AUTO, *sorted(REGISTRY))
"""What ``--switch`` and ``switch.target`` accept."""


class TargetUnavailableError(RuntimeError):
    """The requested switch target cannot run on this machine."""


def lookup(name: str) -> SwitchTarget:
    """The descriptor of a concrete target (ValueError for 'auto' or an unknown name)."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"no switch target {name!r}; choose one of {', '.join(REGISTRY)} (resolve_target() 'auto' first)") from None


def simulated_data_plane(name: str) -> SwitchTarget:
    """The data plane that stands for target ``name`` on the simulated clock: its own
    ``simulated`` one, else the first target's that has one. Every target implements the
    one data-plane contract (docs/dataplane.md) and the differential tests hold them to it,
    so a simulated switch of one is the behaviour of any; only the link rate, which the
    config takes from the target (``bw_mbps: target``), differs between them."""
    own = lookup(name)
    if own.simulated is not None:
        return own
    able = [target for target in REGISTRY.values() if target.simulated is not None]
    if not able:
        raise ValueError("no switch target has a simulated data plane (SwitchTarget.simulated)")
    return able[0]


def resolve_target(name: str, needs_delay_line: bool = False) -> str:
    """'auto' or a target's name -> the concrete target.

    ``needs_delay_line``: the links have a delay and the kernel has no netem, so only a
    target that delays frames itself can run them; 'auto' then picks one.
    """
    return _choose(name, needs_delay_line, undecided_allowed=False)[0]


def root_run_targets(name: str, needs_delay_line: bool | None = False) -> list[str]:
    """What a root run would resolve ``name`` to, as far as this process can tell: one
    target, or, in a process that is not root (a dry run) where a target only root can probe
    comes first, each target a root run might take, in ``auto``'s order (the first that the
    kernel takes). ``needs_delay_line`` None: whether the kernel has netem is not known
    either, so the target a delay line needs is one more possibility."""
    if needs_delay_line is None:
        possible = _choose(name, False, undecided_allowed=True)
        if name != AUTO or _delay_line_target().name in possible:
            return possible
        log.info("switch target auto -> %s if the kernel has no netem (the links have a delay; only root can find out)",
                 _delay_line_target().name)
        return [*possible, _delay_line_target().name]
    return _choose(name, needs_delay_line, undecided_allowed=True)


def delay_line_targets() -> list[str]:
    """The targets that delay frames themselves, for a message that names them."""
    return [t.name for t in REGISTRY.values() if t.delays_frames]


def _delay_line_target() -> SwitchTarget:
    """The first target that delays frames itself and can run here: 'auto' for links with a
    delay on a kernel without netem."""
    return next(t for t in REGISTRY.values() if t.delays_frames and not t.missing())


def _choose(name: str, needs_delay_line: bool, undecided_allowed: bool) -> list[str]:
    if name not in TARGETS:
        raise ValueError(f"unknown switch target {name!r}; choose one of {', '.join(TARGETS)}")
    if name != AUTO:
        problems = REGISTRY[name].missing()
        if undecided_allowed and REGISTRY[name].undecided(problems):
            log.info("switch target %s (whether this machine takes it, only root can find out)", name)
            return [name]
        if problems:
            raise TargetUnavailableError(problems.unavailable())
        log.info("switch target %s", name)
        return [name]
    if needs_delay_line:
        chosen = _delay_line_target()
        log.info("switch target auto -> %s (the links have a delay, the kernel has no netem: only its delay line can delay frames)",
                 chosen.name)
        return [chosen.name]
    passed_over: list[str] = []
    undecided: list[str] = []
    for candidate in REGISTRY.values():
        problems = candidate.missing()
        if not problems or (undecided_allowed and candidate.undecided(problems)):
            undecided.append(candidate.name)
            if problems:
                continue
            reasons = f" ({'; '.join(passed_over)})" if passed_over else ""
            if len(undecided) > 1:
                reasons += f"; only root can find out whether this machine takes {', '.join(undecided[:-1])}"
            log.info("switch target auto -> %s%s", " or ".join(undecided), reasons)
            return undecided
        passed_over.append(problems.passed_over())
    if undecided:
        return undecided
    raise TargetUnavailableError(f"no switch target can run here: {'; '.join(passed_over)}")


def node_class(name: str) -> type:
    """The Mininet switch class of a concrete target (imported only when chosen)."""
    return lookup(name).node_class()
