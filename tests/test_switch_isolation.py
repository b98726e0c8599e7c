"""Two jobs on one switch: neither can touch the other's cells or reach its workers.

The switch is programmed as in conftest.py: job JOB (hosts 0 and 1) owns register cells
0..JOB_POOL-1 of each shadow set, job OTHER_JOB (hosts 3 and 4) the cells after them. Each
case runs both jobs on the same slot numbers, and a misbehaving worker of OTHER_JOB (host 3)
sends, on purpose, slots beyond its pool, JOB's job id, and frames with JOB's workers'
addresses; JOB's sums must stay exact, its workers must get nothing of OTHER_JOB's, and
every refused frame is counted under its own event.
"""

from __future__ import annotations

import numpy as np
import pytest

from switches.switchml import programming
from tests.conftest import JOB, JOB_HOSTS, JOB_POOL, ON_THE_BENCH, OTHER_JOB, SwitchUnderTest
from tests.switch_io import update_frame
from tests.test_switch_behaviour import check_result, values
from tests.test_switch_drops import wait_counts

pytestmark = [pytest.mark.netns, ON_THE_BENCH]  # a standalone test bed: the embedded and bmv2 cases run beside the network tests (-n)

MISBEHAVING = JOB_HOSTS[OTHER_JOB][0]
"""Host 3: a worker of OTHER_JOB that sends what it must not."""


def contribute(switch: SwitchUnderTest, job: int, rank: int, slot: int, elements: np.ndarray, shadow_set: int = 0, seq: int = 0) -> None:
    host = JOB_HOSTS[job][rank]
    switch.ports.send(host, update_frame(switch.testbed.hosts[host], slot, shadow_set, elements, job, seq=seq))


def expect_results(switch: SwitchUnderTest, job: int, slot: int, expected: np.ndarray, shadow_set: int = 0, seq: int = 0) -> None:
    """The job's two workers, and nobody else, get the job's sum."""
    received = switch.ports.receive(2)
    for host in JOB_HOSTS[job]:
        check_result(switch, received, host, slot=slot, shadow_set=shadow_set, seq=seq, expected=expected, exponent=0, job=job)
    assert received.total() == 2, f"job {job}'s result must reach its own workers only"


def test_jobs_on_the_same_slot_numbers_keep_separate_sums(switch: SwitchUnderTest) -> None:
    """Interleaved updates of both jobs to slot 3: each gets its own sum, in its own cells."""
    a0, a1, b0, b1 = values(101, switch.k), values(102, switch.k), values(103, switch.k), values(104, switch.k)
    contribute(switch, JOB, 0, 3, a0)
    contribute(switch, OTHER_JOB, 0, 3, b0)
    assert switch.ports.receive(0).total() == 0
    contribute(switch, JOB, 1, 3, a1)
    expect_results(switch, JOB, 3, a0 + a1)
    contribute(switch, OTHER_JOB, 1, 3, b1)
    expect_results(switch, OTHER_JOB, 3, b0 + b1)
    bitmap = switch.control.register_read(programming.BITMAP_REGISTER)
    assert (bitmap[3], bitmap[JOB_POOL + 3]) == (0b11, 0b11), "JOB in cell 3, OTHER_JOB in cell JOB_POOL + 3"


def test_retransmission_gets_its_own_jobs_result(switch: SwitchUnderTest) -> None:
    """Both jobs completed slot 0; a retransmission of either is answered from its own cell."""
    a0, a1, b0, b1 = values(111, switch.k), values(112, switch.k), values(113, switch.k), values(114, switch.k)
    for job, (x, y) in ((JOB, (a0, a1)), (OTHER_JOB, (b0, b1))):
        contribute(switch, job, 0, 0, x)
        contribute(switch, job, 1, 0, y)
        expect_results(switch, job, 0, x + y)
    contribute(switch, OTHER_JOB, 0, 0, b0)
    received = switch.ports.receive(1)
    check_result(switch, received, MISBEHAVING, slot=0, shadow_set=0, seq=0, expected=b0 + b1, exponent=0, job=OTHER_JOB)
    assert received.total() == 1


@pytest.mark.parametrize("slot", [JOB_POOL, JOB_POOL + 3, 2 * JOB_POOL - 1])
def test_slot_beyond_the_jobs_pool_is_dropped(switch: SwitchUnderTest, slot: int) -> None:
    """OTHER_JOB's slot JOB_POOL + s would be cell 2 * JOB_POOL + s: past its range (and, for
    a job placed first, the next job's cells). It is dropped and counted, nothing changes."""
    a0, a1 = values(121, switch.k), values(122, switch.k)
    contribute(switch, JOB, 0, slot - JOB_POOL, a0)
    contribute(switch, OTHER_JOB, 0, slot, values(123, switch.k))
    assert switch.ports.receive(0).total() == 0
    wait_counts(switch, EV_DROP_OUTSIDE_POOL=1, EV_UPDATE_CONSUMED=1)
    contribute(switch, JOB, 1, slot - JOB_POOL, a1)
    expect_results(switch, JOB, slot - JOB_POOL, a0 + a1)
    counts = switch.counters()
    assert (counts["EV_DROP_OUTSIDE_POOL"], counts["EV_RESULT_MULTICAST"]) == (1, 1)


def test_a_job_placed_first_cannot_reach_the_next_jobs_cells(switch: SwitchUnderTest) -> None:
    """JOB's slot JOB_POOL + 2 would be OTHER_JOB's cell of slot 2: dropped before aggregation."""
    b0, b1 = values(131, switch.k), values(132, switch.k)
    contribute(switch, OTHER_JOB, 0, 2, b0)
    switch.ports.send(0, update_frame(switch.testbed.hosts[0], JOB_POOL + 2, 0, values(133, switch.k), JOB))
    assert switch.ports.receive(0).total() == 0
    wait_counts(switch, EV_DROP_OUTSIDE_POOL=1)
    contribute(switch, OTHER_JOB, 1, 2, b1)
    expect_results(switch, OTHER_JOB, 2, b0 + b1)


def test_another_jobs_id_is_dropped(switch: SwitchUnderTest) -> None:
    """A worker of OTHER_JOB that sends JOB's job id is refused: a job id is not a credential,
    the sender's table entry decides which job it may feed."""
    a0, a1 = values(141, switch.k), values(142, switch.k)
    contribute(switch, JOB, 0, 5, a0)
    for slot in (5, JOB_POOL + 5):
        switch.ports.send(MISBEHAVING, update_frame(switch.testbed.hosts[MISBEHAVING], slot, 0, values(143, switch.k), JOB))
    assert switch.ports.receive(0).total() == 0
    wait_counts(switch, EV_DROP_WRONG_JOB=2)
    contribute(switch, JOB, 1, 5, a1)
    expect_results(switch, JOB, 5, a0 + a1)


@pytest.mark.parametrize("spoofed", [0, 1, 4])
def test_spoofed_sources_are_unknown_senders(switch: SwitchUnderTest, spoofed: int) -> None:
    """Host 3 sends with the addresses of JOB's workers (hosts 0, 1) or of its own job's other
    worker (host 4): (ingress port, source IPv4) matches no entry, so it is dropped, counted,
    and neither job's sum changes."""
    a0, a1 = values(151, switch.k), values(152, switch.k)
    contribute(switch, JOB, 0, 6, a0)
    job = OTHER_JOB if spoofed in JOB_HOSTS[OTHER_JOB] else JOB
    switch.ports.send(MISBEHAVING, update_frame(switch.testbed.hosts[spoofed], 6, 0, values(153, switch.k), job))
    assert switch.ports.receive(0).total() == 0
    wait_counts(switch, EV_DROP_UNKNOWN_SENDER=1, EV_UPDATE_CONSUMED=1)
    contribute(switch, JOB, 1, 6, a1)
    expect_results(switch, JOB, 6, a0 + a1)
    assert switch.control.register_read(programming.BITMAP_REGISTER, JOB_POOL + 6) == 0, "OTHER_JOB's cell untouched"


def test_admission_refuses_pools_beyond_the_registers(switch: SwitchUnderTest) -> None:
    """The control plane partitions the slots; jobs that do not fit together are refused."""
    workers = [programming.WorkerPort(0, 9, "02:00:00:00:09:01", "10.0.9.1")]
    size = len(switch.control.register_read(programming.BITMAP_REGISTER)) // 2
    with pytest.raises(programming.AdmissionError, match="admission refused"):
        programming.admit_jobs([programming.JobRequest(1, workers, size // 2), programming.JobRequest(2, workers, size // 2 + 1)], size)
    overlapping = programming.JobProgram(21, workers, result_mcast_grp=40, slot_base=JOB_POOL - 1, pool_size=2)
    with pytest.raises(programming.AdmissionError, match="both claim"):
        programming.program_jobs(switch.control, [programming.JobProgram(20, workers, 41, slot_base=0, pool_size=JOB_POOL), overlapping])
    with pytest.raises(programming.AdmissionError, match="do not fit"):
        programming.program_jobs(switch.control, [programming.JobProgram(22, workers, 42, slot_base=size - 1, pool_size=2)])
