"""Hierarchical aggregation, one level at a time, on every target (docs/dataplane.md,
"Hierarchical aggregation").

The switch under test is programmed for two jobs. LEAF_JOB: hosts 0 and 1 are its workers
and the switch is their *leaf*: it sends the local sum up to the switch above, which host 2
plays here (it receives the partial sums and answers with results as a spine would).
SPINE_JOB: the switch is the *spine*; hosts 3 and 4 play two leaves (their partial sums are
updates from their own addresses, and results go back to them on the aggregation port).
Each case checks what every host receives, the registers and the events, including the
recovery paths: a lost partial sum or a lost result from above (the leaf asks again when a
worker retransmits), a lost result to a worker (the leaf answers it alone), and results
that do not come from the job's uplink.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import pytest

from protocol import params
from protocol.switchml import params as switchml_params
from protocol.packet import build_frame, Endpoint
from protocol.switchml.packet import encode_payload, frame_bytes, SwitchMLHeader
from switches.switchml import programming
from tests.conftest import ON_THE_BENCH, SwitchTarget, SwitchUnderTest, TARGETS
from base.netns import Testbed
from tests.switch_io import SWITCH, Received, dissect, update_frame
from tests.test_switch_behaviour import check_result, values
from tests.test_switch_drops import wait_counts

pytestmark = [pytest.mark.netns, ON_THE_BENCH]  # a standalone test bed: the embedded and bmv2 cases run beside the network tests (-n)

LEAF_JOB = 21
SPINE_JOB = 22
WORKERS = (0, 1)
SPINE_HOST = 2
LEAF_HOSTS = (3, 4)
POOL = 64
LEAF = Endpoint("02:53:4d:4c:01:01", "10.0.0.253", switchml_params.WORKER_UDP_PORT)
"""The switch's own address as a worker of the switch above (host 2)."""


@pytest.fixture(scope="module")
def leaf_sinks(testbed: Testbed) -> Iterator[None]:
    """Hosts playing leaves receive results on the aggregation port: no ICMP back."""
    with contextlib.ExitStack() as sinks:
        for index in LEAF_HOSTS:
            sinks.enter_context(testbed.hosts[index].udp_socket(switchml_params.UDP_PORT_BASE))
        yield


@pytest.fixture(scope="module")
def target(request: pytest.FixtureRequest, testbed: Testbed, leaf_sinks: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SwitchTarget]:
    """The switch at k (``request.param``: conftest's pytest_generate_tests) as LEAF_JOB's leaf
    (uplink towards host 2) and SPINE_JOB's spine (leaves: hosts 3, 4)."""
    name, k = request.param
    log_dir = tmp_path_factory.mktemp(f"hierarchy-{name}-k{k}")
    hosts = testbed.hosts
    uplink = programming.Uplink(hosts[SPINE_HOST].switch_port, LEAF.mac, LEAF.ipv4, params.SWITCH_MAC, params.SWITCH_IPV4)
    leaf = programming.JobProgram(
        LEAF_JOB, [programming.WorkerPort(rank, hosts[h].switch_port, hosts[h].mac, hosts[h].ipv4) for rank, h in enumerate(WORKERS)],
        result_mcast_grp=2, slot_base=0, pool_size=POOL, uplink=uplink,
    )
    spine = programming.JobProgram(
        SPINE_JOB,
        [programming.WorkerPort(rank, hosts[h].switch_port, hosts[h].mac, hosts[h].ipv4, switchml_params.UDP_PORT_BASE) for rank, h in enumerate(LEAF_HOSTS)],
        result_mcast_grp=3, slot_base=POOL, pool_size=POOL,
    )
    with TARGETS[name](testbed, log_dir, k) as control:
        programming.program_forwarding(control, list(testbed.switch_ports), {})
        programming.program_jobs(control, [leaf, spine])
        yield SwitchTarget(name, control, testbed, k)


def result_from_above(slot: int, shadow_set: int, seq: int, elements: np.ndarray, exponent: int, job: int = LEAF_JOB,
                      source: Endpoint = SWITCH) -> bytes:
    """What the switch above sends the leaf: a result from its address to the leaf's."""
    header = SwitchMLHeader(switchml_params.MSG_RESULT, shadow_set, job, slot, len(elements), exponent, seq)
    destination = Endpoint(LEAF.mac, LEAF.ipv4, switchml_params.UDP_PORT_BASE)
    return build_frame(source, destination, encode_payload(header, elements))


def check_partial(received: Received, *, slot: int, shadow_set: int, seq: int, expected: np.ndarray, exponent: int) -> None:
    """Exactly one frame, at host 2: the leaf's update to the switch above."""
    frames = received.frames[SPINE_HOST]
    assert received.total() == len(frames) == 1, f"one partial sum up, nothing else: {[f.summary() for fs in received.frames.values() for f in fs]}"
    eth, ip, udp, sml = dissect(frames[0])
    assert (eth.src, eth.dst, ip.src, ip.dst) == (LEAF.mac, params.SWITCH_MAC, LEAF.ipv4, params.SWITCH_IPV4)
    assert (udp.dport, udp.chksum, len(frames[0])) == (switchml_params.UDP_PORT_BASE, 0, frame_bytes(len(expected)))
    assert (sml.msg_type, sml.job_id, sml.slot, sml.shadow_set, sml.seq, sml.exponent) == (switchml_params.MSG_UPDATE, LEAF_JOB, slot, shadow_set, seq, exponent)
    assert sml.elements == expected.tolist()


def workers_contribute(switch: SwitchUnderTest, slot: int, shadow_set: int, seq: int, exponents=(0, 0), seeds=(1, 2)) -> np.ndarray:
    hosts = switch.testbed.hosts
    a, b = values(seeds[0], switch.k), values(seeds[1], switch.k)
    switch.ports.send(0, update_frame(hosts[0], slot, shadow_set, a, LEAF_JOB, exponents[0], seq))
    assert switch.ports.receive(0).total() == 0, "a partial slot produces nothing"
    switch.ports.send(1, update_frame(hosts[1], slot, shadow_set, b, LEAF_JOB, exponents[1], seq))
    return a + b


def check_results_to_workers(switch: SwitchUnderTest, received: Received, *, slot: int, shadow_set: int, seq: int, expected: np.ndarray,
                             exponent: int) -> None:
    for index in WORKERS:
        check_result(switch, received, index, slot=slot, shadow_set=shadow_set, seq=seq, expected=expected, exponent=exponent, job=LEAF_JOB)
    assert received.total() == 2


@pytest.mark.every_k
def test_leaf_sends_one_partial_sum_up_and_multicasts_the_result_from_above(switch: SwitchUnderTest) -> None:
    partial = workers_contribute(switch, slot=3, shadow_set=0, seq=40, exponents=(-2, 5))
    check_partial(switch.ports.receive(1), slot=3, shadow_set=0, seq=40, expected=partial, exponent=5)
    total = partial + values(3, switch.k)
    switch.ports.send(SPINE_HOST, result_from_above(3, 0, 40, total, exponent=7))
    check_results_to_workers(switch, switch.ports.receive(2), slot=3, shadow_set=0, seq=40, expected=total, exponent=7)
    counts = switch.counters()
    assert (counts["EV_UPDATE_CONSUMED"], counts["EV_PARTIAL_UP"], counts["EV_RESULT_MULTICAST"]) == (1, 1, 1)
    assert switch.control.register_read(programming.COUNT_REGISTER, 3) == len(WORKERS) + 1, "the result from above is kept"


def test_lost_partial_or_result_from_above_is_asked_again_by_a_retransmission(switch: SwitchUnderTest) -> None:
    """The leaf cannot tell a lost partial sum from a lost result: it sends the partial again."""
    hosts = switch.testbed.hosts
    partial = workers_contribute(switch, slot=4, shadow_set=1, seq=9)
    check_partial(switch.ports.receive(1), slot=4, shadow_set=1, seq=9, expected=partial, exponent=0)
    switch.ports.send(0, update_frame(hosts[0], 4, 1, values(1, switch.k), LEAF_JOB, 0, 9))  # the switch above never answered
    check_partial(switch.ports.receive(1), slot=4, shadow_set=1, seq=9, expected=partial, exponent=0)
    total = partial * 3
    switch.ports.send(SPINE_HOST, result_from_above(4, 1, 9, total, exponent=0))
    check_results_to_workers(switch, switch.ports.receive(2), slot=4, shadow_set=1, seq=9, expected=total, exponent=0)
    assert switch.counters()["EV_PARTIAL_UP"] == 2


def test_result_lost_to_a_worker_is_answered_by_the_leaf_alone(switch: SwitchUnderTest) -> None:
    hosts = switch.testbed.hosts
    partial = workers_contribute(switch, slot=5, shadow_set=0, seq=3)
    switch.ports.receive(1)
    total = partial + values(4, switch.k)
    switch.ports.send(SPINE_HOST, result_from_above(5, 0, 3, total, exponent=-4))
    switch.ports.receive(2)
    switch.ports.send(1, update_frame(hosts[1], 5, 0, values(2, switch.k), LEAF_JOB, 0, 3))
    received = switch.ports.receive(1)
    check_result(switch, received, 1, slot=5, shadow_set=0, seq=3, expected=total, exponent=-4, job=LEAF_JOB)
    assert received.total() == 1, "unicast to the worker that asked; nothing goes up"
    counts = switch.counters()
    assert (counts["EV_RESULT_UNICAST"], counts["EV_PARTIAL_UP"]) == (1, 1)


def test_retransmission_before_local_completion_is_ignored(switch: SwitchUnderTest) -> None:
    hosts = switch.testbed.hosts
    for _ in range(2):
        switch.ports.send(0, update_frame(hosts[0], 6, 0, values(1, switch.k), LEAF_JOB, 0, 1))
    assert switch.ports.receive(0).total() == 0
    wait_counts(switch, EV_UPDATE_CONSUMED=1, EV_RETX_IGNORED=1, EV_PARTIAL_UP=0)


def test_results_not_from_the_jobs_uplink_are_refused(switch: SwitchUnderTest) -> None:
    """Only the job's uplink port and the upper switch's address may complete a leaf's slot;
    a result for a version the leaf did not send up, or a second copy, is stale."""
    partial = workers_contribute(switch, slot=7, shadow_set=0, seq=12)
    switch.ports.receive(1)
    total = partial + values(5, switch.k)
    impostor = Endpoint(switch.testbed.hosts[SPINE_HOST].mac, switch.testbed.hosts[SPINE_HOST].ipv4, switchml_params.UDP_PORT_BASE)
    switch.ports.send(0, result_from_above(7, 0, 12, total, 0))  # a worker's port
    switch.ports.send(SPINE_HOST, result_from_above(7, 0, 12, total, 0, source=impostor))  # not the upper switch's address
    switch.ports.send(SPINE_HOST, result_from_above(7, 0, 12, total, 0, job=SPINE_JOB))  # a job without an uplink here
    switch.ports.send(SPINE_HOST, result_from_above(7, 1, 12, total, 0))  # the other set: nothing sent up there
    switch.ports.send(SPINE_HOST, result_from_above(7, 0, 11, total, 0))  # an older version
    assert switch.ports.receive(0).total() == 0
    wait_counts(switch, EV_DROP_MALFORMED=3, EV_DROP_STALE=2)
    switch.ports.send(SPINE_HOST, result_from_above(7, 0, 12, total, 0))
    check_results_to_workers(switch, switch.ports.receive(2), slot=7, shadow_set=0, seq=12, expected=total, exponent=0)
    switch.ports.send(SPINE_HOST, result_from_above(7, 0, 12, total, 0))  # a repeated copy
    assert switch.ports.receive(0).total() == 0
    wait_counts(switch, EV_DROP_STALE=3, EV_RESULT_MULTICAST=1)


@pytest.mark.every_k
def test_spine_aggregates_leaves_and_answers_them_on_the_aggregation_port(switch: SwitchUnderTest) -> None:
    """At the top, leaves are workers: max exponent, results to each leaf's address and the
    aggregation port (so the leaf parses them), a leaf's retransmission answered alone."""
    hosts = switch.testbed.hosts
    a, b = values(8, switch.k), values(9, switch.k)
    switch.ports.send(LEAF_HOSTS[0], update_frame(hosts[LEAF_HOSTS[0]], 2, 0, a, SPINE_JOB, -1, 77))
    switch.ports.send(LEAF_HOSTS[1], update_frame(hosts[LEAF_HOSTS[1]], 2, 0, b, SPINE_JOB, 6, 77))
    received = switch.ports.receive(2)
    for index in LEAF_HOSTS:
        (result,) = received.results(index)
        eth, ip, udp, sml = dissect(result)
        assert (eth.dst, ip.src, ip.dst, udp.dport) == (hosts[index].mac, params.SWITCH_IPV4, hosts[index].ipv4, switchml_params.UDP_PORT_BASE)
        assert (sml.msg_type, sml.job_id, sml.exponent, sml.elements) == (switchml_params.MSG_RESULT, SPINE_JOB, 6, (a + b).tolist())
    assert received.total() == 2
    switch.ports.send(LEAF_HOSTS[1], update_frame(hosts[LEAF_HOSTS[1]], 2, 0, b, SPINE_JOB, 6, 77))
    again = switch.ports.receive(1)
    assert len(again.results(LEAF_HOSTS[1])) == again.total() == 1
    assert switch.control.register_read(programming.BITMAP_REGISTER, POOL + 2) == 0b11
