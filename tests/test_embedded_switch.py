"""Embedded-switch specifics: the k and pool start-up options, register naming, the launcher.

The shared behaviour of every target is in test_switch_behaviour.py / test_switch_drops.py;
these cases exercise what only the embedded switch has (any k at start-up, its process
launcher and its error reporting).
"""

from __future__ import annotations

import numpy as np
import pytest

from protocol.switchml import params
from switches.switchml import programming
from switches.control import ControlPlaneError
from switches.embedded.launcher import EmbeddedSwitchProcess, SwitchStartError, embedded_switch
from base.netns import Testbed
from tests.switch_io import SwitchPorts, update_frame
from tests.conftest import ON_THE_BENCH

pytestmark = [pytest.mark.netns, ON_THE_BENCH, pytest.mark.embedded]  # the embedded switch on a standalone test bed: beside the network tests (-n)

JOB = 3


def test_small_k_and_pool(testbed: Testbed, tmp_path) -> None:
    """A switch started with --k 4 --max-pool-size 8 aggregates 4-element packets in 16 cells."""
    k, pool = 4, 8
    hosts = testbed.hosts
    with embedded_switch(testbed.switch_ports, tmp_path, k=k, max_pool_size=pool) as control:
        programming.program_forwarding(control, list(testbed.switch_ports), {})
        workers = [programming.WorkerPort(h.index, h.switch_port, h.mac, h.ipv4) for h in hosts]
        programming.program_aggregation(control, programming.JobProgram(JOB, workers))
        ports = SwitchPorts(testbed)
        try:
            contributions = [np.array([1, -2, 3, 1 << 30], dtype=np.int32) * (i + 1) for i in range(len(hosts))]
            for host, elements in zip(hosts, contributions):
                ports.send(host.index, update_frame(host, pool - 1, 1, elements, JOB, exponent=host.index))
            received = ports.receive(len(hosts))
            expected = np.sum(np.stack(contributions).astype(np.int64), axis=0).astype(np.int32)
            for host in hosts:
                (result,) = received.results(host.index)
                assert result.elements == expected.tolist() and result.num_elements == k
            assert control.register_read("SwitchMLIngress.value_03") == [0] * (2 * pool - 1) + [int(expected[3]) & 0xFFFFFFFF]
            assert control.register_read(programming.COUNT_REGISTER, 2 * pool - 1) == len(hosts)
            ports.send(0, update_frame(hosts[0], 0, 0, np.zeros(params.DEFAULT_K, dtype=np.int32), JOB))
            assert ports.receive(0).total() == 0
            assert programming.read_event_counters(control)["EV_DROP_MALFORMED"] == 1
        finally:
            ports.close()
        with pytest.raises(ControlPlaneError, match="unknown register"):
            control.register_read(f"SwitchMLIngress.value_{k:02d}")


def test_value_register_is_a_column(testbed: Testbed, tmp_path) -> None:
    """register_write to value_05 shows in value_05 only; values are bit<32> both ways."""
    with embedded_switch(testbed.switch_ports, tmp_path, k=8, max_pool_size=4) as control:
        control.register_write("SwitchMLIngress.value_05", 2, 0xFFFFFFFE)
        assert control.register_read("SwitchMLIngress.value_05") == [0, 0, 0xFFFFFFFE, 0, 0, 0, 0, 0]
        assert not any(control.register_read("SwitchMLIngress.value_04"))
        with pytest.raises(ControlPlaneError, match="does not fit bit<32>"):
            control.register_write("SwitchMLIngress.value_05", 0, 1 << 32)
        control.register_reset("SwitchMLIngress.value_05")
        assert not any(control.register_read("SwitchMLIngress.value_05"))


def test_launcher_reports_a_switch_that_cannot_start(tmp_path) -> None:
    switch = EmbeddedSwitchProcess({1: "sml-no-such-if"}, tmp_path, k=params.DEFAULT_K, max_pool_size=params.MAX_POOL_SIZE)
    with pytest.raises(SwitchStartError, match="exited with .*no-such|No such device"):
        switch.start(timeout=20)
    assert not switch.running


def test_stop_removes_the_control_socket(testbed: Testbed, tmp_path) -> None:
    switch = EmbeddedSwitchProcess(testbed.switch_ports, tmp_path, k=params.DEFAULT_K, max_pool_size=params.MAX_POOL_SIZE)
    switch.start()
    socket_path = switch.control_socket
    assert socket_path.exists()
    switch.stop()
    assert not switch.running and not socket_path.exists()
