"""Fault drills of issue 44 (round 4) in Mininet: a switch that is broken while it runs is
named as the cause, not the rank its frozen state seems to wait for."""

from __future__ import annotations

import glob
import os
import subprocess
import time
from pathlib import Path

import pytest

from network.evidence import aggregation_evidence
from tests.conftest import require_target
from tests.experiment_runs import disturb_mid_run, leftovers

SHORT_JOB = ["topology.workers=4", "workload.elements=500000", "topology.link.bw_mbps=2", "methods=[switchml]", "repetitions=1",
             "limits.job_timeout_s=20"]
"""A job of a few seconds at 2 Mbit/s (about 9 s at the bound), with a deadline that passes soon after it stalls."""


def in_mininet(test):
    for mark in (pytest.mark.mininet, pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0, reason="Mininet tests need root")):
        test = mark(test)
    return test


@in_mininet
@pytest.mark.ebpf
def test_an_ebpf_switch_detached_from_a_port_for_good_is_named_not_rank_0(tmp_path: Path) -> None:
    """Its tc filter deleted mid-job: the run failed at the deadline blaming rank 0 from the
    registers' frozen state; nothing checked that the program was still attached."""
    require_target("ebpf")
    from switches.ebpf.loader import FILTER_PREF

    def detach(runner: subprocess.Popen, worker: int) -> None:
        subprocess.run(["tc", "filter", "del", "dev", "s1-eth3", "ingress", "pref", str(FILTER_PREF)], check=True)

    out = tmp_path / "out"
    code, output = disturb_mid_run(out, SHORT_JOB, ".* --rank 2", detach, target="ebpf")
    assert code == 3, output[-3000:]
    assert "switch s1: its eBPF program (id " in output and "is no longer attached to the ingress of s1-eth3" in output, output[-3000:]
    assert "meanwhile switchml: rank" in output and "worker rank 0 on h1" not in output, output[-3000:]
    assert not leftovers(str(out))


def test_the_switch_counters_name_a_reset_of_its_registers() -> None:
    """bmv2's registers reset through the Thrift CLI mid-job gave wrong sums, which the verifier
    caught (exit 1) with no cause named. A job's counters take (n - 1) updates aggregated and one
    result multicast per slot round, loss or not; a reset makes the switch aggregate again what
    it had, or forget what it counted."""
    fine = {"EV_UPDATE_CONSUMED": 3 * 690, "EV_RESULT_MULTICAST": 690, "EV_RESULT_UNICAST": 5, "EV_RETX_IGNORED": 12}
    assert aggregation_evidence(fine, "s1", 4, 690) is None
    again = {**fine, "EV_UPDATE_CONSUMED": 3 * 690 + 7}
    found = aggregation_evidence(again, "s1", 4, 690)
    assert found == ("switch s1 aggregated 2,077 updates and multicast 690 results for a job of 690 slot rounds x 4 workers, which takes "
                     "2,070 and 690: its aggregation state changed under the job (its registers reset or written from outside it, "
                     "as through its control-plane CLI, or the switch restarted)")
    assert aggregation_evidence({**fine, "EV_RESULT_MULTICAST": 600}, "s1", 4, 690) is not None


@in_mininet
def test_aggregation_registers_cleared_mid_job_are_named_where_the_sums_are_wrong(tmp_path: Path) -> None:
    """bmv2's registers reset through the Thrift CLI mid-job (one register after the other,
    while frames flow) gave wrong sums, which the verifier caught (exit 1) with no cause named.
    Here the embedded switch's value registers are cleared through its control socket while
    its bitmaps and counts stay, as such a reset leaves them between two registers: slots
    complete with partial sums, and every rank gets the same wrong integer sum."""
    from switches.switchml import programming
    from switches.embedded.launcher import SOCKET_DIR_PREFIX
    from switches.remote_control import SocketControl

    def clear_values(runner: subprocess.Popen, worker: int) -> None:
        [socket_path] = glob.glob(f"/tmp/switchml-net-*/{SOCKET_DIR_PREFIX}s1-*/control.sock")
        control = SocketControl(Path(socket_path))
        try:
            for _ in range(10):  # over 5 s of the 9 s job, wherever the workers' release falls
                control.registers_reset(programming.value_registers(256))
                time.sleep(0.5)
        finally:
            control.close()

    out = tmp_path / "out"
    code, output = disturb_mid_run(out, SHORT_JOB, ".* --rank 2", clear_values)
    assert code == 1, output[-3000:]
    assert "NOT VERIFIED: integer sum: " in output, output[-3000:]
    assert "the likely cause: every rank got the same wrong integer sum (" in output and "switch s1 multicast a wrong aggregate" in output, \
        output[-3000:]
    assert not leftovers(str(out))
