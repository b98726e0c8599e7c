"""Link shaping: what the kernel has is probed, what is applied is checked, failures are loud."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from network import shaping
from network.shaping import ShapingError, TcCapabilities, probe_tc, run_local, shape_interface
from topologies.model import LinkSpec

pytestmark = pytest.mark.netns

if os.geteuid() != 0:
    pytest.skip("tc and namespaces need root", allow_module_level=True)

NETNS = f"smlshape{os.getpid()}"


@pytest.fixture
def veth() -> Iterator[str]:
    """One end of a veth pair inside a throw-away namespace."""
    subprocess.run(["ip", "netns", "add", NETNS], check=True)
    try:
        subprocess.run(["ip", "netns", "exec", NETNS, "ip", "link", "add", "shapea", "type", "veth", "peer", "name", "shapeb"], check=True)
        yield "shapea"
    finally:
        subprocess.run(["ip", "netns", "delete", NETNS], check=True)


def in_netns(argv: list[str] | tuple[str, ...]) -> tuple[int, str]:
    return run_local(["ip", "netns", "exec", NETNS, *argv])


def qdiscs(interface: str) -> str:
    return in_netns(["tc", "qdisc", "show", "dev", interface])[1]


def test_probe_finds_htb_and_pfifo() -> None:
    caps = probe_tc()
    assert caps.htb and caps.pfifo  # both exist on every kernel this project runs on
    assert set(caps.describe()) == {"htb", "netem", "pfifo"}


def test_rate_and_queue_are_applied(veth: str) -> None:
    caps = TcCapabilities(htb=True, netem=False, pfifo=True)
    applied = shape_interface(in_netns, veth, LinkSpec(bw_mbps=2.5, delay_ms=0, loss=0, queue_packets=50), caps, loss_by_netem=False, delay_by_netem=False)
    assert applied.bandwidth == "htb 2.5 Mbit/s"
    assert applied.queue == "pfifo 50 packets"
    shown = qdiscs(veth)
    assert "qdisc htb 5: root" in shown and "qdisc pfifo 10: parent 5:1 limit 50p" in shown
    classes = in_netns(["tc", "class", "show", "dev", veth])[1]
    assert "rate 2500Kbit" in classes


def test_loss_without_netem_is_left_to_the_switch(veth: str) -> None:
    caps = TcCapabilities(htb=True, netem=False, pfifo=True)
    applied = shape_interface(in_netns, veth, LinkSpec(bw_mbps=None, delay_ms=0, loss=0.01, queue_packets=20), caps, loss_by_netem=False, delay_by_netem=False)
    assert applied.loss == "switch_drop_simulator"
    assert applied.bandwidth == "unshaped"
    assert "netem" not in qdiscs(veth)


def test_netem_delay_without_netem_is_an_error_not_a_silent_no_op(veth: str) -> None:
    caps = TcCapabilities(htb=True, netem=False, pfifo=True)
    with pytest.raises(ShapingError, match="shapea: delay 5 ms / loss 0 by netem, which this kernel does not have"):
        shape_interface(in_netns, veth, LinkSpec(bw_mbps=10, delay_ms=5, loss=0, queue_packets=20), caps, loss_by_netem=False, delay_by_netem=True)


def test_delay_left_to_the_switch_is_recorded_as_such(veth: str) -> None:
    caps = TcCapabilities(htb=True, netem=False, pfifo=True)
    applied = shape_interface(in_netns, veth, LinkSpec(bw_mbps=10, delay_ms=5, loss=0, queue_packets=20), caps, loss_by_netem=False, delay_by_netem=False)
    assert applied.delay == "switch_delay_line"
    assert "netem" not in qdiscs(veth)


def test_a_failing_tc_command_raises_with_its_message() -> None:
    caps = TcCapabilities(htb=True, netem=False, pfifo=True)
    with pytest.raises(ShapingError, match=r"tc qdisc replace dev nosuchdev0 .* failed on nosuchdev0: .*(Cannot find device|No such device)"):
        shape_interface(run_local, "nosuchdev0", LinkSpec(bw_mbps=10, delay_ms=0, loss=0, queue_packets=20), caps, loss_by_netem=False, delay_by_netem=False)


@pytest.mark.skipif(not probe_tc().netem, reason="this kernel has no netem qdisc")
def test_netem_carries_delay_and_loss_where_the_kernel_has_it(veth: str) -> None:
    applied = shape_interface(in_netns, veth, LinkSpec(bw_mbps=10, delay_ms=5, loss=0.01, queue_packets=20), probe_tc(), loss_by_netem=True, delay_by_netem=True)
    assert applied.delay == "netem 5.0 ms" and applied.loss.startswith("netem")
    assert "netem" in qdiscs(veth)


def test_the_configs_congestion_control_is_allowed_to_the_hosts_namespaces(tmp_path, monkeypatch) -> None:
    """A kernel booted with BBR allows namespaces only 'reno bbr', so every host's pin of cubic
    failed with EPERM: the runner adds it to the allowed list, once, and leaves the rest."""
    allowed = tmp_path / "tcp_allowed_congestion_control"
    allowed.write_text("reno bbr\n")
    monkeypatch.setattr(shaping, "ALLOWED_CONGESTION_CONTROL", allowed)
    shaping.allow_congestion_control("cubic")
    assert allowed.read_text().split() == ["reno", "bbr", "cubic"]
    shaping.allow_congestion_control("bbr")
    assert allowed.read_text().split() == ["reno", "bbr", "cubic"]


def test_a_congestion_control_the_kernel_offers_but_does_not_allow_is_named_as_such() -> None:
    """On a server where nobody widened the list (another server of a cluster), the failure says
    which list refuses it, not that the kernel lacks an algorithm it lists as available."""
    answers = {"sysctl": (255, 'sysctl: setting key "net.ipv4.tcp_congestion_control": Operation not permitted'),
               str(shaping.Path("/proc/sys/net/ipv4/tcp_available_congestion_control")): (0, "reno bbr cubic"),
               str(shaping.ALLOWED_CONGESTION_CONTROL): (0, "reno bbr")}

    def run(argv: list[str]) -> tuple[int, str]:
        return answers[argv[0] if argv[0] == "sysctl" else argv[1]]

    with pytest.raises(ShapingError, match=r"h1: tcp_congestion_control 'cubic' is not allowed to network namespaces "
                                           r"\(net.ipv4.tcp_allowed_congestion_control: reno bbr; add it there as root\)"):
        shaping.pin_congestion_control(run, "h1", "cubic")
    answers[str(shaping.Path("/proc/sys/net/ipv4/tcp_available_congestion_control"))] = (0, "reno bbr")
    with pytest.raises(ShapingError, match=r"'cubic' is not one this kernel offers"):
        shaping.pin_congestion_control(run, "h1", "cubic")
