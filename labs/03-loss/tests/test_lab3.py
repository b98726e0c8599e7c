"""Lab 3: the switch's retransmission branch, called in-process (labs/bench.py)."""

from __future__ import annotations

from labs.bench import JOB, MCAST_GRP, IngressBench
from protocol.switchml import params
from switches.embedded.switchml.ingress import DROP, RESULT_TO_GROUP, RESULT_TO_PORT


def test_retransmission_to_a_complete_slot_is_answered_to_its_sender_only() -> None:
    bench = IngressBench(n=2)
    bench.send(0, slot=2, shadow_set=0, values=[1, 2, 3, 4], exponent=1)
    bench.send(1, slot=2, shadow_set=0, values=[4, 3, 2, 1], exponent=3)
    decision = bench.send(1, slot=2, shadow_set=0, values=[4, 3, 2, 1], exponent=3)
    assert decision == (RESULT_TO_PORT, 2, 1, JOB), "to its sender only: (RESULT_TO_PORT, in_port, rank, job id)"
    assert bench.result() == (params.MSG_RESULT, 3, [5, 5, 5, 5]), "the stored sum and exponent, not the resent update"
    assert bench.cell("count", 2, 0) == 2, "a retransmission is not a new contribution"
    assert bench.events()["EV_RESULT_UNICAST"] == 1


def test_retransmission_before_completion_is_ignored() -> None:
    bench = IngressBench(n=3)
    bench.send(0, slot=5, shadow_set=1, values=[1, 1, 1, 1])
    assert bench.send(0, slot=5, shadow_set=1, values=[1, 1, 1, 1]) == DROP
    assert bench.ingress.values.rows[8 + 5].tolist() == [1, 1, 1, 1], "a copy must not be added twice"
    assert bench.cell("count", 5, 1) == 1
    assert bench.events() == {"EV_UPDATE_CONSUMED": 1, "EV_RETX_IGNORED": 1}


def test_a_leaf_answers_a_retransmission_once_the_result_from_above_is_in() -> None:
    """At a leaf a version is complete when the result from the switch above is stored
    (count = num_workers + 1, the ``complete`` given to your region), not when the last
    local update arrived: until then a retransmission asks the switch above again."""
    bench = IngressBench(n=2, leaf=True)
    bench.send(0, slot=6, shadow_set=1, values=[1, 1, 1, 1])
    bench.send(1, slot=6, shadow_set=1, values=[2, 2, 2, 2])
    assert bench.result_from_above(slot=6, shadow_set=1, values=[30, 30, 30, 30], exponent=2) == (RESULT_TO_GROUP, MCAST_GRP, JOB)
    assert bench.send(1, slot=6, shadow_set=1, values=[2, 2, 2, 2]) == (RESULT_TO_PORT, 2, 1, JOB), "a lost result is resent from the leaf"
    assert bench.result() == (params.MSG_RESULT, 2, [30, 30, 30, 30]), "the result from above, not the local sum"
    assert bench.events()["EV_RESULT_UNICAST"] == 1
