"""What a switch target must refuse, and its control plane's state handling, with real packets.

Refused packets (unknown sender, wrong job, malformed, a slot past the registers) must be
dropped, counted under their own event and leave the aggregation registers untouched. Also
covered: wrap-around and unsigned register reads, back-to-back jobs, the drop simulator at
probability 0 and 1, full L2 tables, and control-plane errors.
"""

from __future__ import annotations

import time

import ipaddress

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from protocol.switchml import params
from protocol.packet import IPV4_OFFSET
from switches.switchml import programming
from switches.control import ControlPlaneError, TableFullError
from tests.conftest import JOB, N_HOSTS, ON_THE_BENCH, SwitchUnderTest
from tests.switch_io import update_frame
from tests.test_switch_behaviour import UNKNOWN_MAC, check_result, reduce_round, values

pytestmark = [pytest.mark.netns, ON_THE_BENCH]  # a standalone test bed: the embedded and bmv2 cases run beside the network tests (-n)

VALUE_00, VALUE_01 = programming.value_registers(2)
"""The first two value registers, which every k has."""


def wait_counts(switch: SwitchUnderTest, timeout: float = 3.0, **expected: int) -> dict[str, int]:
    """Counters once they reach ``expected`` (the switch may still be busy), else fail."""
    deadline = time.monotonic() + timeout
    while True:
        counts = switch.counters()
        if all(counts[name] == value for name, value in expected.items()) or time.monotonic() > deadline:
            assert {name: counts[name] for name in expected} == expected
            return counts
        time.sleep(0.02)


def assert_state_untouched(switch: SwitchUnderTest) -> None:
    control = switch.control
    for register in (programming.BITMAP_REGISTER, programming.COUNT_REGISTER, programming.EXPONENT_REGISTER, VALUE_00):
        assert not any(control.register_read(register)), f"{register} changed"


def send_and_expect_drop(switch: SwitchUnderTest, host_index: int, frame: bytes, event: str) -> None:
    switch.ports.send(host_index, frame)
    assert switch.ports.receive(0).total() == 0
    counts = wait_counts(switch, **{event: 1})
    assert counts["EV_UPDATE_CONSUMED"] == counts["EV_RESULT_MULTICAST"] == counts["EGV_SENT"] == 0
    assert_state_untouched(switch)


def test_unknown_sender_is_dropped(switch: SwitchUnderTest) -> None:
    bystander = switch.testbed.hosts[2]
    send_and_expect_drop(switch, 2, update_frame(bystander, 0, 0, values(1, switch.k), JOB, exponent=4), "EV_DROP_UNKNOWN_SENDER")


def test_worker_address_on_the_wrong_port_is_an_unknown_sender(switch: SwitchUnderTest) -> None:
    """The rank comes from (ingress port, source IPv4): worker 0's address from port 3 is refused."""
    spoofed = update_frame(switch.testbed.hosts[0], 0, 0, values(1, switch.k), JOB)
    send_and_expect_drop(switch, 2, spoofed, "EV_DROP_UNKNOWN_SENDER")


def test_wrong_job_is_dropped(switch: SwitchUnderTest) -> None:
    send_and_expect_drop(switch, 0, update_frame(switch.testbed.hosts[0], 0, 0, values(1, switch.k), JOB + 1), "EV_DROP_WRONG_JOB")


MALFORMED = {  # (a worker's host, k) -> the frame
    "truncated": lambda host, k: update_frame(host, 0, 0, values(1, k), JOB)[:-10],
    "wrong_k": lambda host, k: update_frame(host, 0, 0, values(1, k)[: k // 2], JOB),
    "k_plus_one": lambda host, k: update_frame(host, 0, 0, values(1, k + 1), JOB),
    "num_elements_mismatch": lambda host, k: update_frame(host, 0, 0, values(1, k), JOB, num_elements=k - 1),
    # num_elements is 16 bits: a switch comparing one of its bytes only would take these
    "num_elements_high_byte": lambda host, k: update_frame(host, 0, 0, values(1, k), JOB, num_elements=(k ^ 0x100) & 0xFFFF),
    "result_not_update": lambda host, k: update_frame(host, 0, 0, values(1, k), JOB, msg_type=params.MSG_RESULT),
    "shadow_set_2": lambda host, k: update_frame(host, 0, 2, values(1, k), JOB),
    "slot_out_of_range": lambda host, k: update_frame(host, params.MAX_POOL_SIZE, 0, values(1, k), JOB),
}


@pytest.mark.every_k
@pytest.mark.parametrize("variant", sorted(MALFORMED))
def test_malformed_update_is_dropped(switch: SwitchUnderTest, variant: str) -> None:
    send_and_expect_drop(switch, 0, MALFORMED[variant](switch.testbed.hosts[0], switch.k), "EV_DROP_MALFORMED")


IP_SRC = slice(IPV4_OFFSET + 12, IPV4_OFFSET + 16)
"""The IPv4 source address in an untagged frame (the switch does not verify the checksum)."""
STRAY_IPV4 = "10.0.0.77"
"""The source of the worker_table entry that only the test below writes (no host has it), so
the entry it leaves behind (the interface deletes no entries) matches nothing else."""


def test_update_to_a_cell_past_the_registers_is_dropped_and_counted(switch: SwitchUnderTest) -> None:
    """Defence in depth: a set_worker entry whose slot range runs past the registers, written
    around the control plane's check (the target's own primitive), must not let an update
    reach a cell that is not the job's: drop it, count EV_DROP_OUTSIDE_POOL, write nothing.
    (Before: the embedded switch died of an IndexError, bmv2 wrote the other shadow set's
    cell, the eBPF switch dropped it without counting.)"""
    bystander = switch.testbed.hosts[2]
    last_slot = params.MAX_POOL_SIZE - 1
    key = (bystander.switch_port, int(ipaddress.IPv4Address(STRAY_IPV4)))
    switch.control._table_add(programming.WORKER_TABLE, "set_worker", key, (0, JOB, 2, 2, last_slot, 2))
    frame = bytearray(update_frame(bystander, 1, 0, values(1, switch.k), JOB))  # cell last_slot + 1: past the registers
    frame[IP_SRC] = ipaddress.IPv4Address(STRAY_IPV4).packed
    send_and_expect_drop(switch, 2, bytes(frame), "EV_DROP_OUTSIDE_POOL")


@pytest.mark.every_k
def test_sums_wrap_and_registers_read_unsigned(switch: SwitchUnderTest) -> None:
    hosts = switch.testbed.hosts
    a = np.full(switch.k, np.iinfo(np.int32).max, dtype=np.int32)
    b = np.arange(1, switch.k + 1, dtype=np.int32)
    b[0] = np.iinfo(np.int32).min  # element 0: INT32_MAX + INT32_MIN = -1
    switch.ports.send(0, update_frame(hosts[0], 0, 0, a, JOB, exponent=-9))
    switch.ports.send(1, update_frame(hosts[1], 0, 0, b, JOB, exponent=-20))
    received = switch.ports.receive(2)
    expected = (a.astype(np.int64) + b).astype(np.int32)  # two's complement wrap, like bit<32>
    assert expected[1] == np.iinfo(np.int32).min + 1
    for index in (0, 1):
        check_result(switch, received, index, slot=0, shadow_set=0, seq=0, expected=expected, exponent=-9)
    assert switch.control.register_read(VALUE_00, 0) == (1 << 32) - 1
    last = programming.value_registers(switch.k)[-1]  # value_31 / value_255: the cell holds all k
    assert switch.control.register_read(last, 0) == int(expected[-1]) & 0xFFFFFFFF
    assert switch.control.register_read(programming.EXPONENT_REGISTER, 0) == (-9) & 0xFF


def test_back_to_back_jobs_need_a_reset(switch: SwitchUnderTest) -> None:
    """State outlives a job: a fresh job at set 0 is a retransmission until the registers are reset."""
    hosts = switch.testbed.hosts
    first = reduce_round(switch, slot=0, shadow_set=0, seeds=(1, 2))
    switch.ports.send(0, update_frame(hosts[0], 0, 0, values(3, switch.k), JOB))
    stale = switch.ports.receive(1)
    check_result(switch, stale, 0, slot=0, shadow_set=0, seq=0, expected=first, exponent=0)
    programming.reset_aggregation_state(switch.control, switch.k)
    programming.reset_event_counters(switch.control)
    assert_state_untouched(switch)
    reduce_round(switch, slot=0, shadow_set=0, seeds=(3, 4))
    wait_counts(switch, EV_UPDATE_CONSUMED=1, EV_RESULT_MULTICAST=1, EV_RESULT_UNICAST=0)


def test_resetting_some_registers_leaves_the_others(switch: SwitchUnderTest) -> None:
    """registers_reset clears exactly the registers it names, on every target (the eBPF
    switch clears whole slots only when it is given all of a slot's registers)."""
    reduce_round(switch, slot=0, shadow_set=0, seeds=(1, 2))
    before = switch.control.register_read(VALUE_01, 0), switch.control.register_read(programming.BITMAP_REGISTER, 0)
    assert all(before) and switch.control.register_read(VALUE_00, 0)
    switch.control.registers_reset([VALUE_00, programming.COUNT_REGISTER])
    assert not any(switch.control.register_read(VALUE_00)) and not any(switch.control.register_read(programming.COUNT_REGISTER))
    assert (switch.control.register_read(VALUE_01, 0), switch.control.register_read(programming.BITMAP_REGISTER, 0)) == before


def test_ingress_drop_probability_one_drops_everything(switch: SwitchUnderTest) -> None:
    hosts = switch.testbed.hosts
    programming.set_drop_probability(switch.control, 1.0, 0.0)
    for _ in range(5):
        for index in (0, 1):
            switch.ports.send(index, update_frame(hosts[index], 0, 0, values(index, switch.k), JOB))
    switch.ports.send(2, update_frame(hosts[2], 0, 0, values(2, switch.k), JOB))  # any packet, known or not
    assert switch.ports.receive(0).total() == 0
    wait_counts(switch, EV_DROP_SIM_INGRESS=11, EV_UPDATE_CONSUMED=0, EV_DROP_UNKNOWN_SENDER=0, EGV_SENT=0)
    assert_state_untouched(switch)


def test_egress_drop_probability_one_drops_every_copy(switch: SwitchUnderTest) -> None:
    hosts = switch.testbed.hosts
    programming.set_drop_probability(switch.control, 0.0, 1.0)
    for index in (0, 1):
        switch.ports.send(index, update_frame(hosts[index], 0, 0, values(index, switch.k), JOB))
    assert switch.ports.receive(0).total() == 0
    wait_counts(switch, EV_RESULT_MULTICAST=1, EGV_DROP_SIM_EGRESS=2, EGV_SENT=0)


def wait_entries(switch: SwitchUnderTest, table: str, entries: int, timeout: float = 3.0) -> None:
    """Until ``table`` holds ``entries`` (bmv2 learns in its controller, after the frame)."""
    deadline = time.monotonic() + timeout
    while switch.control.table_num_entries(table) != entries:
        assert time.monotonic() < deadline, f"{table}: {switch.control.table_num_entries(table)} entries, expected {entries}"
        time.sleep(0.02)


def filler_mac(index: int) -> str:
    """A made-up MAC no host has, for filling the L2 tables."""
    return f"02:00:00:0f:{index >> 8:02x}:{index & 0xFF:02x}"


def test_full_l2_tables_learn_nothing_and_count_it(switch: SwitchUnderTest) -> None:
    """Both L2 tables hold params.L2_TABLE_SIZE entries on every target. A source the full
    l2_table, or the full l2_learn_table, cannot take is not learned (frames to it stay
    flooded), and each frame that tried is counted in EV_L2_NOT_LEARNED with its bytes."""
    control, hosts, size = switch.control, switch.testbed.hosts, params.L2_TABLE_SIZE
    for index in range(size - 1):  # l2_learn_table one short of full, l2_table two
        control.table_add(programming.L2_TABLE, "l2_forward", [filler_mac(index)], [1])
        if index < size - 2:
            control.table_add(programming.L2_LEARN_TABLE, "NoAction", [filler_mac(index)])

    def flood(sender: int, dst: int | None, payload: bytes) -> int:
        """A frame from host ``sender`` to host ``dst`` (None: UNKNOWN_MAC) that must be flooded; its length."""
        to = (UNKNOWN_MAC, "10.0.1.1") if dst is None else (hosts[dst].mac, hosts[dst].ipv4)
        frame = bytes(Ether(src=hosts[sender].mac, dst=to[0]) / IP(src=hosts[sender].ipv4, dst=to[1])
                      / UDP(sport=1234, dport=params.WORKER_UDP_PORT) / payload.ljust(32))
        switch.ports.send(sender, frame)
        received = switch.ports.receive(N_HOSTS - 1)
        assert [len(received.frames[i]) for i in range(N_HOSTS)] == [int(i != sender) for i in range(N_HOSTS)]
        return len(frame)

    flood(0, None, b"fills both tables")  # host 0 learned: l2_table full
    wait_entries(switch, programming.L2_TABLE, size)
    not_learned = [flood(2, None, b"l2_table is full")]  # into l2_learn_table only: now full too
    wait_counts(switch, EV_L2_NOT_LEARNED=1)
    wait_entries(switch, programming.L2_LEARN_TABLE, size)
    not_learned.append(flood(3, None, b"l2_learn_table is full, a longer payload"))
    wait_counts(switch, EV_L2_NOT_LEARNED=2)
    not_learned.append(flood(1, 2, b"to host 2, whom nothing forwards to"))  # host 1 not learned either
    counts = wait_counts(switch, EV_L2_NOT_LEARNED=3, EV_FORWARDED=4)
    assert control.counter_read(programming.EVENT_COUNTER)[params.P4_CONSTANTS["EV_L2_NOT_LEARNED"]] == (3, sum(not_learned))
    assert counts["EGV_SENT"] == 4 * (N_HOSTS - 1)
    for table in (programming.L2_TABLE, programming.L2_LEARN_TABLE):
        assert control.table_num_entries(table) == size
        with pytest.raises(TableFullError, match=rf"{table}: table full \({size} entries\)"):
            control.table_add(table, "NoAction" if table == programming.L2_LEARN_TABLE else "l2_forward",
                              [filler_mac(size)], [] if table == programming.L2_LEARN_TABLE else [1])
    to_host0 = Ether(src=hosts[1].mac, dst=hosts[0].mac) / IP(src=hosts[1].ipv4, dst=hosts[0].ipv4) / UDP(sport=1234, dport=params.WORKER_UDP_PORT)
    switch.ports.send(1, bytes(to_host0 / b"learned".ljust(32)))
    received = switch.ports.receive(1)
    assert [len(received.frames[i]) for i in range(N_HOSTS)] == [1, 0, 0, 0, 0], "host 0, learned, is still unicast"


def test_drop_probability_zero_drops_nothing(switch: SwitchUnderTest) -> None:
    programming.set_drop_probability(switch.control, 0.0, 0.0)
    for slot in range(20):
        reduce_round(switch, slot=slot, shadow_set=0, seeds=(slot, slot + 100))
    wait_counts(switch, EV_RESULT_MULTICAST=20, EGV_SENT=40, EV_DROP_SIM_INGRESS=0, EGV_DROP_SIM_EGRESS=0)


CONTROL_ERRORS = {
    "unknown_table": ("unknown table", lambda c: c.table_add("SwitchMLIngress.no_such_table", "set_worker", [1, "10.0.0.1"], [0, 1, 2, 2, 0, 1])),
    "unknown_action": ("unknown action", lambda c: c.table_add(programming.WORKER_TABLE, "no_such_action", [1, "10.0.0.9"], [])),
    "wrong_key_count": ("takes 2 value", lambda c: c.table_add(programming.WORKER_TABLE, "set_worker", [1], [0, 1, 2, 2, 0, 1])),
    "key_too_wide": ("does not fit bit<9>", lambda c: c.table_add(programming.WORKER_TABLE, "set_worker", [1 << 9, "10.0.0.9"], [0, 1, 2, 2, 0, 1])),
    "bad_key": ("cannot parse", lambda c: c.table_add(programming.L2_TABLE, "l2_forward", ["not-a-mac"], [1])),
    "wrong_param_count": ("takes 6 value", lambda c: c.table_add(programming.WORKER_TABLE, "set_worker", [1, "10.0.0.9"], [0])),
    "slot_range_past_registers": (
        "run past the switch's", lambda c: c.table_add(programming.WORKER_TABLE, "set_worker", [1, "10.0.0.9"], [0, JOB, 2, 2, params.MAX_POOL_SIZE - 1, 2])
    ),
    "default_slot_range_past_registers": (
        "run past the switch's", lambda c: c.table_set_default(programming.WORKER_TABLE, "set_worker", [0, JOB, 2, 2, params.MAX_POOL_SIZE, 1])
    ),
    "uplink_slot_range_past_registers": (
        "run past the switch's",
        lambda c: c.table_add(programming.UPLINK_TABLE, "set_uplink", [JOB + 100], [1, "02:00:00:00:00:01", "10.0.0.9", "02:00:00:00:00:02", "10.0.0.8", 2, 2, 1, params.MAX_POOL_SIZE]),
    ),
    "duplicate_entry": ("duplicate entry", lambda c: c.table_add(programming.WORKER_TABLE, "set_worker", [1, "10.0.0.1"], [0, JOB, 2, 2, 0, 1])),
    "unknown_register": ("unknown register", lambda c: c.register_read("SwitchMLIngress.no_such_register")),
    "register_index": ("out of range", lambda c: c.register_write(programming.BITMAP_REGISTER, 1 << 20, 1)),
    "unknown_counter": ("unknown counter", lambda c: c.counter_read("SwitchMLIngress.no_such_counter")),
    "duplicate_group": ("already exists", lambda c: c.mc_mgrp_create(params.FLOOD_MCAST_GRP)),
    "unknown_group": ("does not exist", lambda c: c.mc_node_associate(999, 0)),
}


@pytest.mark.parametrize("error", sorted(CONTROL_ERRORS))
def test_control_plane_errors(switch: SwitchUnderTest, error: str) -> None:
    message, call = CONTROL_ERRORS[error]
    with pytest.raises(ControlPlaneError, match=message):
        call(switch.control)
    reduce_round(switch, slot=0, shadow_set=0, seeds=(1, 2))  # the switch and its tables are unharmed
