"""Choosing a switch target: what bmv2 and ebpf need, what 'auto' picks, what a target that
cannot run says; and that every registered target describes itself completely."""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from protocol.switchml import params
from switches import targets
from switches import bmv2

ALL_BMV2_MODULES = set(bmv2.PYTHON_MODULES)


def with_detect(target: targets.SwitchTarget, problems: list[str]) -> targets.SwitchTarget:
    """``target`` as a subclass whose ``detect`` finds ``problems``: a target's behaviour is its methods."""

    class Detected(type(target)):  # type: ignore[misc]
        def detect(self) -> list[str]:
            return list(problems)

    return Detected(**{field.name: getattr(target, field.name) for field in dataclasses.fields(target)})


def pretend(monkeypatch: pytest.MonkeyPatch, executables: set[str], modules: set[str], ebpf_refused: list[str] | None = None) -> None:
    """Make only ``executables`` findable on PATH and only ``modules`` importable; the eBPF
    switch refused for the reasons ``ebpf_refused`` (default: no clang)."""
    refused = ["clang"] if ebpf_refused is None else ebpf_refused
    monkeypatch.setitem(targets.REGISTRY, "ebpf", with_detect(targets.REGISTRY["ebpf"], refused))
    monkeypatch.setattr(bmv2.shutil, "which", lambda name: f"/usr/bin/{name}" if name in executables else None)
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str):  # type: ignore[no-untyped-def]
        if name in ALL_BMV2_MODULES:
            return real_find_spec("json") if name in modules else None
        return real_find_spec(name)

    monkeypatch.setattr(bmv2.importlib.util, "find_spec", find_spec)


def test_detect_nothing_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, {"simple_switch", "p4c"}, ALL_BMV2_MODULES)
    assert bmv2.TARGET.detect() == []


def test_detect_names_each_missing_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, {"p4c"}, ALL_BMV2_MODULES - {"p4utils"})
    assert bmv2.TARGET.detect() == ["simple_switch", "p4utils"]


def test_auto_picks_bmv2_only_when_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, {"simple_switch", "p4c"}, ALL_BMV2_MODULES)
    assert targets.resolve_target("auto") == "bmv2"
    pretend(monkeypatch, {"simple_switch"}, ALL_BMV2_MODULES)
    assert targets.resolve_target("auto") == "embedded"


def test_auto_picks_ebpf_when_bmv2_is_incomplete_and_the_kernel_takes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, {"p4c"}, ALL_BMV2_MODULES, ebpf_refused=[])
    assert targets.resolve_target("auto") == "ebpf"
    pretend(monkeypatch, {"simple_switch", "p4c"}, ALL_BMV2_MODULES, ebpf_refused=[])
    assert targets.resolve_target("auto") == "bmv2", "bmv2 comes first where it can run"


def test_auto_picks_embedded_when_only_its_delay_line_can_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, {"simple_switch", "p4c"}, ALL_BMV2_MODULES, ebpf_refused=[])
    assert targets.resolve_target("auto", needs_delay_line=True) == "embedded"
    assert targets.resolve_target("ebpf", needs_delay_line=True) == "ebpf", "an explicit choice stands (the network refuses the delay)"


def test_ebpf_when_refused_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, set(), set(), ebpf_refused=["the bpf system call (Operation not permitted)"])
    with pytest.raises(targets.TargetUnavailableError, match=r"'ebpf' needs the bpf system call \(Operation not permitted\)"):
        targets.resolve_target("ebpf")
    pretend(monkeypatch, set(), set(), ebpf_refused=[])
    assert targets.resolve_target("ebpf") == "ebpf"


def test_ebpf_node_class() -> None:
    pytest.importorskip("mininet.node")
    from switches.ebpf.node import EbpfSwitchNode

    assert targets.node_class("ebpf") is EbpfSwitchNode


def test_bmv2_when_missing_says_what_and_where(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, {"simple_switch"}, ALL_BMV2_MODULES - {"p4utils"})
    with pytest.raises(targets.TargetUnavailableError) as error:
        targets.resolve_target("bmv2")
    message = str(error.value)
    assert message.startswith("switch target 'bmv2' needs p4c, p4utils, which this machine lacks")
    assert "vagrant up" in message


def test_bmv2_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, {"simple_switch", "p4c"}, ALL_BMV2_MODULES)
    assert targets.resolve_target("bmv2") == "bmv2"


def test_embedded_needs_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, set(), set())
    assert targets.resolve_target("embedded") == "embedded"


def test_unknown_target_is_rejected() -> None:
    with pytest.raises(ValueError, match="tofino"):
        targets.resolve_target("tofino")
    with pytest.raises(ValueError):
        targets.node_class("auto")


def test_bmv2_node_class() -> None:
    pytest.importorskip("mininet.node")
    from switches.bmv2.node import Bmv2SwitchNode

    assert targets.node_class("bmv2") is Bmv2SwitchNode


def test_embedded_node_class() -> None:
    embedded = pytest.importorskip("switches.embedded.node", reason="switches/embedded not present yet")
    assert targets.node_class("embedded") is embedded.EmbeddedSwitchNode


def test_auto_logs_why_it_passed_targets_over(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    pretend(monkeypatch, {"p4c"}, ALL_BMV2_MODULES, ebpf_refused=["clang (Debian: clang, llvm)", "bpftool (Debian: bpftool)"])
    with caplog.at_level("INFO", logger=targets.__name__):
        assert targets.resolve_target("auto") == "embedded"
    assert caplog.messages == [
        "switch target auto -> embedded (bmv2 lacks: simple_switch; ebpf: clang (Debian: clang, llvm); bpftool (Debian: bpftool))"
    ]


def test_ebpf_when_refused_names_the_remedy(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, set(), set(), ebpf_refused=["clang", "root"])
    with pytest.raises(targets.TargetUnavailableError) as error:
        targets.resolve_target("ebpf")
    assert str(error.value) == (
        "switch target 'ebpf' needs clang; root, which this machine lacks or refuses. "
        "scripts/bootstrap.sh installs the tools; or choose --switch embedded."
    )


def test_the_choices_are_auto_and_the_registry_in_auto_s_order() -> None:
    assert targets.TARGETS[0] == "auto" and set(targets.TARGETS[1:]) == set(targets.REGISTRY)
    assert [name for name in targets.REGISTRY if name in {"bmv2", "ebpf", "embedded"}] == ["bmv2", "ebpf", "embedded"]


@pytest.mark.parametrize("name", sorted(targets.REGISTRY))
def test_every_target_describes_itself(name: str) -> None:
    """Its name is its key, and its Mininet node runs it (the node reads the same descriptor)."""
    pytest.importorskip("mininet.node")
    from switches.mininet_node import TargetSwitch

    described = targets.REGISTRY[name]
    assert described.name == name
    assert described.describe_build()
    node = targets.node_class(name)
    assert issubclass(node, TargetSwitch) and node.target is described


def test_auto_falls_back_on_a_target_that_needs_nothing() -> None:
    assert not list(targets.REGISTRY.values())[-1].missing()


def test_a_k_the_program_is_not_built_for_is_refused() -> None:
    with pytest.raises(ValueError, match=r"the ebpf switch's eBPF program is built for k = 32, 64, 128, 256; got k = 5"):
        targets.lookup("ebpf").check_k(5)
    for k in params.K_CHOICES:
        targets.lookup("bmv2").check_k(k)
        targets.lookup("ebpf").check_k(k)
    targets.lookup("embedded").check_k(5)


def test_only_the_embedded_switch_of_the_three_has_a_delay_line() -> None:
    assert {name: targets.REGISTRY[name].delays_frames for name in ("bmv2", "ebpf", "embedded")} == {
        "bmv2": False, "ebpf": False, "embedded": True}
