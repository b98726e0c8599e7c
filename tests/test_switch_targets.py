"""Choosing a switch target: what bmv2 and ebpf need, what 'auto' picks, what a target that
cannot run says."""

from __future__ import annotations

import importlib.util

import pytest

from switches import targets

ALL_BMV2_MODULES = set(targets.BMV2_PYTHON_MODULES)


def pretend(monkeypatch: pytest.MonkeyPatch, executables: set[str], modules: set[str], ebpf_refused: list[str] | None = None) -> None:
    """Make only ``executables`` findable on PATH and only ``modules`` importable; the eBPF
    switch refused for the reasons ``ebpf_refused`` (default: no clang)."""
    refused = ["clang"] if ebpf_refused is None else ebpf_refused
    monkeypatch.setattr(targets, "detect_ebpf", lambda: list(refused))
    monkeypatch.setattr(targets.shutil, "which", lambda name: f"/usr/bin/{name}" if name in executables else None)
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str):  # type: ignore[no-untyped-def]
        if name in ALL_BMV2_MODULES:
            return real_find_spec("json") if name in modules else None
        return real_find_spec(name)

    monkeypatch.setattr(targets.importlib.util, "find_spec", find_spec)


def test_detect_nothing_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, {"simple_switch", "p4c"}, ALL_BMV2_MODULES)
    assert targets.detect_bmv2() == []


def test_detect_names_each_missing_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    pretend(monkeypatch, {"p4c"}, ALL_BMV2_MODULES - {"p4utils"})
    assert targets.detect_bmv2() == ["simple_switch", "p4utils"]


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
