"""ATP's P4 program (p4/atp/) on bmv2, against the embedded pipeline it mirrors.

- The behaviour cases of atp-protocol.md that are about the switch run here unchanged: they
  are tests/test_atp_switch.py's own functions, given a bmv2 driver (tests/atp_switch_driver.py)
  as their ``switch`` fixture instead of the embedded one.
- A differential test feeds seeded random frame sequences (every path of ATPIngress and
  ATPEgress, malformed, untrusted and ordinary frames too) to bmv2 and to the embedded
  ATPPipeline, programmed with the same calls, and asserts the same frames out of the same
  ports, byte for byte, and the same counters after every step.
- ECN from bmv2's own egress queue (deq_qdepth), which lock-step driving never fills.
- Contract checks that need no switch: the checked-in generated code is current, and the
  compiled program's tables, registers and counters are the embedded pipeline's.

Skipped, saying why, where bmv2 or p4c is missing (tests/conftest.py's require_target) or
without root (network namespaces).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

import test_atp_switch as cases
from atp_network import ps_endpoint, worker_endpoint
from atp_switch_driver import ATPSwitchDriver, Bmv2ATPSwitch, EmbeddedATPSwitch
from base.netns import Testbed
from protocol.atp import params
from protocol.atp.packet import ATP_OFFSET, FIELD_OFFSETS, decode_payload
from protocol.packet import IPV4_OFFSET, UDP_OFFSET, Endpoint, build_frame, ipv4_checksum
from switches import standalone
from switches.bmv2.atp.compile import ATPCompileOptions, compile_atp
from switches.bmv2.atp.switch import run_atp_bmv2
from switches.embedded.atp.pipeline import ATPPipeline
from tests.conftest import require_target
from tests.switch_io import SwitchPorts

pytestmark = [pytest.mark.bmv2]

K, POOL, N = cases.K, cases.POOL, cases.N
HOSTS = 8
"""Ports 0..7 of the cases: two jobs of three workers and their PSes (test_atp_switch.JOB_PORTS)."""
GENERATOR = params.ATP_P4_DIR / "gen_elements.py"


def require_bmv2_and_root() -> None:
    require_target("bmv2")
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")


# -- contract: no switch needed ---------------------------------------------------------------


def test_the_checked_in_per_value_code_is_what_the_generator_writes() -> None:
    checked = subprocess.run([sys.executable, str(GENERATOR), "--check"], capture_output=True, text=True, check=False)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize("k", params.K_CHOICES)
def test_bmv2_offers_the_control_plane_the_embedded_pipelines_tables_registers_and_counters(k: int, tmp_path: Path) -> None:
    """Actions and their parameters, key widths, table, register and counter sizes, as the
    control plane checks its calls against them (SwitchControl.schema): the same on both
    targets, or one set of programming calls could not program both. Key names are p4c's
    rendering of the same fields (``ipv4.srcAddr`` for ``hdr.ipv4.srcAddr``)."""
    require_target("bmv2")
    pool = 16
    with run_atp_bmv2({}, tmp_path, k=k, pool_size=pool) as (_, control):
        compiled = control.schema
    embedded = ATPPipeline(k, pool).schema()
    tables = {name: table for name, table in compiled.tables.items() if not name.rpartition(".")[2].startswith("tbl_")}
    assert set(tables) == set(embedded.tables)
    for name, table in embedded.tables.items():
        assert (tables[name].actions, tables[name].size) == (table.actions, table.size), name
        assert [(f.name.rpartition(".")[2], f.bits) for f in tables[name].keys] == [(f.name.rpartition(".")[2], f.bits) for f in table.keys], name
    assert dict(compiled.registers) == dict(embedded.registers)
    assert dict(compiled.counters) == dict(embedded.counters)


# -- a bmv2 switch on a test bed --------------------------------------------------------------


@pytest.fixture(scope="module")
def testbed() -> Iterator[Testbed]:
    """HOSTS namespaces cabled to bmv2 ports 1..HOSTS."""
    require_bmv2_and_root()
    with standalone.testbed(HOSTS) as bed:
        yield bed


@contextlib.contextmanager
def bmv2_switch(testbed: Testbed, log_dir: Path, k: int = K, pool_size: int = POOL) -> Iterator[Bmv2ATPSwitch]:
    """A fresh simple_switch with atp.json (cached build), its ECN threshold the program's default."""
    with run_atp_bmv2(testbed.switch_ports, log_dir, k=k, pool_size=pool_size, command_log=log_dir / "commands.txt") as (_, control):
        ports = SwitchPorts(testbed)
        try:
            switch = Bmv2ATPSwitch(control, ports, k, pool_size)
            switch.set_ecn_threshold(params.DEFAULT_ECN_THRESHOLD)
            yield switch
        finally:
            ports.close()


@pytest.fixture
def switch(testbed: Testbed, tmp_path: Path) -> Iterator[ATPSwitchDriver]:
    """test_atp_switch's two jobs on a fresh bmv2 (its cases take this ``switch``)."""
    with bmv2_switch(testbed, tmp_path) as bmv2:
        yield cases.program_jobs(bmv2)


# -- the behaviour cases, on bmv2 -------------------------------------------------------------
# test_atp_switch's functions, collected here too: pytest gives them this module's ``switch``.

test_n_contributions_make_a_full_sum_to_the_ps_whose_result_frees_and_multicasts = cases.test_n_contributions_make_a_full_sum_to_the_ps_whose_result_frees_and_multicasts
test_the_next_sequence_on_a_freed_aggregator_claims_it_and_overwrites_the_old_sums = cases.test_the_next_sequence_on_a_freed_aggregator_claims_it_and_overwrites_the_old_sums
test_another_job_on_a_taken_aggregator_is_tagged_and_goes_to_its_own_ps = cases.test_another_job_on_a_taken_aggregator_is_tagged_and_goes_to_its_own_ps
test_the_ps_sums_a_collided_sequence_and_the_workers_adopt_the_new_index_it_names = cases.test_the_ps_sums_a_collided_sequence_and_the_workers_adopt_the_new_index_it_names
test_a_duplicate_before_completion_is_dropped_and_counted_once = cases.test_a_duplicate_before_completion_is_dropped_and_counted_once
test_a_duplicate_after_completion_goes_to_the_ps_again_with_the_stored_sums = cases.test_a_duplicate_after_completion_goes_to_the_ps_again_with_the_stored_sums
test_a_resend_flushes_the_partial_sum_to_the_ps_and_frees_the_aggregator = cases.test_a_resend_flushes_the_partial_sum_to_the_ps_and_frees_the_aggregator
test_a_resend_on_someone_elses_aggregator_passes_through_untagged = cases.test_a_resend_on_someone_elses_aggregator_passes_through_untagged
test_a_result_that_does_not_own_the_aggregator_frees_nothing_but_still_reaches_the_workers = cases.test_a_result_that_does_not_own_the_aggregator_frees_nothing_but_still_reaches_the_workers
test_ecn_on_one_contribution_reaches_every_worker_and_halves_its_window = cases.test_ecn_on_one_contribution_reaches_every_worker_and_halves_its_window
test_overflow_packets_pass_through_to_the_ps_untouched = cases.test_overflow_packets_pass_through_to_the_ps_untouched
test_other_traffic_is_forwarded_by_l2 = cases.test_other_traffic_is_forwarded_by_l2
test_packets_the_switch_cannot_trust_are_counted_and_change_nothing = cases.test_packets_the_switch_cannot_trust_are_counted_and_change_nothing
test_one_worker_jobs_sum_without_the_reference_codes_stale_values = cases.test_one_worker_jobs_sum_without_the_reference_codes_stale_values
