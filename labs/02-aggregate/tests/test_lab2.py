"""Lab 2: the aggregation step of the embedded switch, called in-process (labs/bench.py)."""

from __future__ import annotations

from labs.bench import JOB, MCAST_GRP, UPLINK_PORT, IngressBench
from protocol.switchml import params
from switches.embedded.switchml.ingress import DROP, RESULT_TO_GROUP, UPDATE_TO_PORT


def test_first_update_is_stored_and_dropped() -> None:
    bench = IngressBench(n=2)
    assert bench.send(0, slot=3, shadow_set=0, values=[1, -2, 3, 4], exponent=-5, seq=7) == DROP
    assert bench.ingress.values.rows[3].tolist() == [1, -2, 3, 4]
    assert (bench.cell("bitmap", 3, 0), bench.cell("count", 3, 0), bench.cell("seq", 3, 0)) == (0b01, 1, 7)
    assert bench.cell("exponent", 3, 0) & 0xFF == (-5) & 0xFF
    assert bench.events() == {"EV_UPDATE_CONSUMED": 1}


def test_last_update_completes_the_slot_and_is_multicast() -> None:
    bench = IngressBench(n=3)
    bench.send(0, slot=1, shadow_set=1, values=[1, 2, 3, 4], exponent=2)
    bench.send(2, slot=1, shadow_set=1, values=[10, 20, 30, 40], exponent=-1)
    decision = bench.send(1, slot=1, shadow_set=1, values=[-100, 0, 2**31 - 1, 0], exponent=6)
    assert decision == (RESULT_TO_GROUP, MCAST_GRP, JOB), "the last update returns (RESULT_TO_GROUP, mcast_grp, job id)"
    msg_type, exponent, elements = bench.result()
    assert msg_type == params.MSG_RESULT
    assert exponent == 6, "the result carries the largest exponent of the slot"
    assert elements == [-89, 22, -(2**31) + 32, 44], "int32 addition wraps like bit<32>"
    assert (bench.cell("bitmap", 1, 1), bench.cell("count", 1, 1)) == (0b111, 3)
    assert bench.events() == {"EV_UPDATE_CONSUMED": 2, "EV_RESULT_MULTICAST": 1}


def test_a_new_version_starts_from_its_first_update_not_the_old_sum() -> None:
    bench = IngressBench(n=2)
    bench.send(0, slot=0, shadow_set=0, values=[5, 5, 5, 5], seq=0)
    bench.send(1, slot=0, shadow_set=0, values=[1, 1, 1, 1], seq=0)
    bench.send(0, slot=0, shadow_set=1, values=[0, 0, 0, 0], seq=1)
    assert bench.cell("bitmap", 0, 0) == 0b10, "a contribution to one set clears the rank in the other"
    bench.send(1, slot=0, shadow_set=1, values=[0, 0, 0, 0], seq=1)
    bench.send(0, slot=0, shadow_set=0, values=[7, 8, 9, 10], seq=2)
    assert bench.send(1, slot=0, shadow_set=0, values=[1, 1, 1, 1], seq=2) == (RESULT_TO_GROUP, MCAST_GRP, JOB), "RESULT_TO_GROUP"
    assert bench.result()[2] == [8, 9, 10, 11], "the first update of a version is stored, not added: 8, 9, 10, 11"


def test_a_leaf_sends_its_complete_local_sum_up_instead_of_multicasting() -> None:
    """At a leaf of a hierarchy (docs/dataplane.md, "Hierarchical aggregation") the local sum
    goes to the switch above as one update; the code after your first region does that,
    from the count your region keeps."""
    bench = IngressBench(n=2, leaf=True)
    assert bench.send(0, slot=4, shadow_set=0, values=[1, 2, 3, 4], exponent=1) == DROP
    assert bench.send(1, slot=4, shadow_set=0, values=[2, 2, 2, 2], exponent=3) == (UPDATE_TO_PORT, UPLINK_PORT)
    msg_type, exponent, elements = bench.result()
    assert (msg_type, exponent, elements) == (params.MSG_UPDATE, 3, [3, 4, 5, 6]), "the local sum goes up as an update"
    assert bench.events() == {"EV_UPDATE_CONSUMED": 1, "EV_PARTIAL_UP": 1}
