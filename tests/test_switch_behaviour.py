"""The behaviour every SwitchML switch target must show, checked with real packets.

Hosts 0 and 1 are the two workers of job JOB, host 2 a bystander, hosts 3 and 4 the
workers of another job sharing the switch (see conftest.py; test_switch_isolation.py). Each
case sends frames from the hosts' namespaces through the switch and checks what arrives
where: payload sums, exponent, echoed header fields, per-rank addresses, and the
switch's event counters.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from protocol import params
from protocol.switchml import params as switchml_params
from protocol.packet import ipv4_checksum, IPV4_OFFSET
from protocol.switchml.packet import frame_bytes
from switches.switchml import programming
from tests.conftest import JOB, JOB_HOSTS, JOB_POOL, N_HOSTS, ON_THE_BENCH, SwitchUnderTest
from tests.switch_io import Received, dissect, learned_entries, update_frame, vlan_tagged

pytestmark = [pytest.mark.netns, ON_THE_BENCH]  # a standalone test bed: the embedded and bmv2 cases run beside the network tests (-n)

def values(seed: int, k: int) -> np.ndarray:
    """k distinct, signed test elements (includes negatives, so sign handling is checked)."""
    return np.random.default_rng(seed).integers(-(10**6), 10**6, size=k, dtype=np.int64).astype(np.int32)


def check_result(
    switch: SwitchUnderTest, received: Received, index: int, *, slot: int, shadow_set: int, seq: int, expected: np.ndarray, exponent: int,
    job: int = JOB,
) -> None:
    """Exactly one result at host ``index``: addressed to it, from the switch, fields echoed."""
    results = received.results(index)
    assert len(results) == 1, f"host {index} got {len(results)} results: {[r.summary() for r in received.frames[index]]}"
    host = switch.testbed.hosts[index]
    eth, ip, udp, sml = dissect(results[0])
    assert (eth.dst, eth.src) == (host.mac, params.SWITCH_MAC)
    assert (ip.src, ip.dst) == (params.SWITCH_IPV4, host.ipv4)
    assert ip.chksum == ipv4_checksum(bytes(results[0]), IPV4_OFFSET), "IPv4 checksum recomputed after the rewrite"
    assert (udp.sport, udp.dport, udp.chksum) == (switchml_params.UDP_PORT_BASE, switchml_params.WORKER_UDP_PORT, 0)
    assert sml.msg_type == switchml_params.MSG_RESULT
    assert (sml.job_id, sml.slot, sml.shadow_set, sml.seq, sml.num_elements) == (job, slot, shadow_set, seq, switch.k)
    assert sml.exponent == exponent
    assert sml.elements == expected.tolist()


def reduce_round(switch: SwitchUnderTest, slot: int, shadow_set: int, seeds: tuple[int, int], exponents=(0, 0), seq: int = 0) -> np.ndarray:
    """Both workers contribute to (slot, set); both must get the multicast result."""
    a, b = values(seeds[0], switch.k), values(seeds[1], switch.k)
    switch.ports.send(0, update_frame(switch.testbed.hosts[0], slot, shadow_set, a, JOB, exponents[0], seq))
    assert switch.ports.receive(0).total() == 0, "a partial slot must not produce output"
    switch.ports.send(1, update_frame(switch.testbed.hosts[1], slot, shadow_set, b, JOB, exponents[1], seq))
    received = switch.ports.receive(2)
    expected = a + b
    for index in (0, 1):
        check_result(switch, received, index, slot=slot, shadow_set=shadow_set, seq=seq, expected=expected, exponent=max(exponents))
    assert received.total() == 2, "the result goes to the two workers only"
    return expected


@pytest.mark.every_k
def test_basic_reduction(switch: SwitchUnderTest) -> None:
    reduce_round(switch, slot=0, shadow_set=0, seeds=(1, 2), exponents=(-3, 5), seq=41)
    counts = switch.counters()
    assert (counts["EV_UPDATE_CONSUMED"], counts["EV_RESULT_MULTICAST"], counts["EGV_SENT"]) == (1, 1, 2)
    assert switch.control.register_read("SwitchMLIngress.count", 0) == 2
    assert switch.control.register_read("SwitchMLIngress.bitmap", 0) == 0b11
    assert switch.control.register_read("SwitchMLIngress.exponent", 0) == 5


def assert_counted_once(switch: SwitchUnderTest, *events: str) -> None:
    """Each of ``events`` counted one frame, and its bytes (frame_bytes(k))."""
    cells = dict(zip(switchml_params.EVENT_COUNTER_CELLS, switch.control.counter_read(programming.EVENT_COUNTER)))
    frame = frame_bytes(switch.k)
    for event in events:
        packets, length = cells[event]
        assert (packets, length) == (1, frame), f"{event} counted {packets} frame(s) and {length} bytes; one frame is {frame} bytes"


def test_an_update_and_its_result_count_their_frames_bytes(switch: SwitchUnderTest) -> None:
    """The event counter counts packets and bytes (docs/dataplane.md): each event adds its
    frame's length. No graded test read the bytes, so a counter that added 1 scored full marks."""
    reduce_round(switch, slot=2, shadow_set=0, seeds=(1, 2), seq=5)
    assert_counted_once(switch, "EV_UPDATE_CONSUMED", "EV_RESULT_MULTICAST")


def test_a_resend_counts_its_frames_bytes(switch: SwitchUnderTest) -> None:
    """A resend before the slot completes (ignored) and one after (the result again, to its
    sender) each count their frame's length: a resend counted with 0 bytes scored full marks."""
    first = update_frame(switch.testbed.hosts[0], 2, 0, values(1, switch.k), JOB, seq=5)
    switch.ports.send(0, first)
    switch.ports.send(0, first)
    assert switch.ports.receive(0).total() == 0, "both taken in before the slot completes (ports are not served in order)"
    switch.ports.send(1, update_frame(switch.testbed.hosts[1], 2, 0, values(2, switch.k), JOB, seq=5))
    assert switch.ports.receive(2).total() == 2
    switch.ports.send(0, first)
    assert switch.ports.receive(1).total() == 1
    assert_counted_once(switch, "EV_RETX_IGNORED", "EV_RESULT_UNICAST")


@pytest.mark.every_k
def test_retransmission_after_reduction_gets_unicast_result(switch: SwitchUnderTest) -> None:
    expected = reduce_round(switch, slot=3, shadow_set=0, seeds=(3, 4), seq=9)
    switch.ports.send(0, update_frame(switch.testbed.hosts[0], 3, 0, values(3, switch.k), JOB, seq=9))
    received = switch.ports.receive(1)
    check_result(switch, received, 0, slot=3, shadow_set=0, seq=9, expected=expected, exponent=0)
    assert received.total() == 1, "a retransmitted result is unicast to its sender only"
    assert switch.counters()["EV_RESULT_UNICAST"] == 1


@pytest.mark.every_k
def test_reduction_in_the_other_set(switch: SwitchUnderTest) -> None:
    reduce_round(switch, slot=5, shadow_set=1, seeds=(5, 6), exponents=(2, -7))
    pool = len(switch.control.register_read("SwitchMLIngress.bitmap")) // 2
    assert switch.control.register_read("SwitchMLIngress.bitmap", pool + 5) == 0b11
    assert switch.control.register_read("SwitchMLIngress.bitmap", 5) == 0


def test_reductions_in_both_sets(switch: SwitchUnderTest) -> None:
    reduce_round(switch, slot=1, shadow_set=0, seeds=(7, 8))
    reduce_round(switch, slot=1, shadow_set=1, seeds=(9, 10))
    assert switch.counters()["EV_RESULT_MULTICAST"] == 2


@pytest.mark.every_k
def test_slot_reuse(switch: SwitchUnderTest) -> None:
    """The third round in set 0 starts from the new values, not the old sum."""
    for round_, seeds in enumerate([(11, 12), (13, 14), (15, 16)]):
        reduce_round(switch, slot=2, shadow_set=round_ % 2, seeds=seeds, seq=round_)
    assert switch.counters()["EV_RESULT_MULTICAST"] == 3


def test_retransmissions_before_completion_are_ignored(switch: SwitchUnderTest) -> None:
    hosts = switch.testbed.hosts
    a, b = values(17, switch.k), values(18, switch.k)
    for _ in range(3):
        switch.ports.send(0, update_frame(hosts[0], 4, 0, a, JOB))
    assert switch.ports.receive(0).total() == 0
    switch.ports.send(1, update_frame(hosts[1], 4, 0, b, JOB))
    received = switch.ports.receive(2)
    for index in (0, 1):
        check_result(switch, received, index, slot=4, shadow_set=0, seq=0, expected=a + b, exponent=0)
    counts = switch.counters()
    assert (counts["EV_UPDATE_CONSUMED"], counts["EV_RETX_IGNORED"], counts["EV_RESULT_MULTICAST"]) == (1, 2, 1)


@pytest.mark.every_k
def test_retransmission_of_the_previous_sets_result(switch: SwitchUnderTest) -> None:
    """Worker 0 moved on to set 1; worker 1 lost the set-0 result and asks again."""
    hosts = switch.testbed.hosts
    expected = reduce_round(switch, slot=6, shadow_set=0, seeds=(19, 20), seq=1)
    switch.ports.send(0, update_frame(hosts[0], 6, 1, values(21, switch.k), JOB, seq=2))
    assert switch.ports.receive(0).total() == 0
    switch.ports.send(1, update_frame(hosts[1], 6, 0, values(20, switch.k), JOB, seq=1))
    received = switch.ports.receive(1)
    check_result(switch, received, 1, slot=6, shadow_set=0, seq=1, expected=expected, exponent=0)
    assert received.total() == 1


def test_slot_reuse_with_retransmission(switch: SwitchUnderTest) -> None:
    hosts = switch.testbed.hosts
    first = reduce_round(switch, slot=7, shadow_set=0, seeds=(22, 23))
    a1, b1 = values(24, switch.k), values(25, switch.k)
    switch.ports.send(0, update_frame(hosts[0], 7, 1, a1, JOB, seq=1))
    switch.ports.send(1, update_frame(hosts[1], 7, 0, values(23, switch.k), JOB))  # retransmission of set 0
    received = switch.ports.receive(1)
    check_result(switch, received, 1, slot=7, shadow_set=0, seq=0, expected=first, exponent=0)
    switch.ports.send(1, update_frame(hosts[1], 7, 1, b1, JOB, seq=1))
    received = switch.ports.receive(2)
    for index in (0, 1):
        check_result(switch, received, index, slot=7, shadow_set=1, seq=1, expected=a1 + b1, exponent=0)
    counts = switch.counters()
    assert (counts["EV_RESULT_MULTICAST"], counts["EV_RESULT_UNICAST"]) == (2, 1)


def stale_copy_is_dropped(switch: SwitchUnderTest, frame: bytes) -> None:
    """A reordered copy of an update reaches the switch: nothing comes out, nothing is added."""
    before = {r: switch.control.register_read(r, 0) for r in ("SwitchMLIngress.bitmap", "SwitchMLIngress.count")}
    switch.ports.send(0, frame)
    assert switch.ports.receive(0).total() == 0
    assert switch.counters()["EV_DROP_STALE"] == 1
    assert {r: switch.control.register_read(r, 0) for r in before} == before


def test_stale_update_cannot_open_the_next_version(switch: SwitchUnderTest) -> None:
    """The reordering hazard (docs/dataplane.md, "Reordering"): both workers have moved on
    from slot 0's set-0 version (seq 10) to set 1, so set 0's bitmap is empty again. A
    late copy of worker 0's seq-10 update then looks like the first contribution of the next
    set-0 version; without the seq guard it would be stored as worker 0's share of that
    version, and worker 0's real update (seq 12) would be ignored as a retransmission."""
    hosts = switch.testbed.hosts
    reduce_round(switch, slot=0, shadow_set=0, seeds=(1, 2), seq=10)
    reduce_round(switch, slot=0, shadow_set=1, seeds=(3, 4), seq=11)
    assert switch.control.register_read("SwitchMLIngress.bitmap", 0) == 0
    stale_copy_is_dropped(switch, update_frame(hosts[0], 0, 0, values(1, switch.k), JOB, seq=10))
    reduce_round(switch, slot=0, shadow_set=0, seeds=(5, 6), seq=12)  # exactly 5 + 6


@pytest.mark.every_k
def test_stale_update_cannot_rejoin_a_finished_version(switch: SwitchUnderTest) -> None:
    """The same hazard while the version is still held: worker 0 has moved on (its bit is
    cleared from set 0), worker 1 has not. Without the guard the late copy would add worker
    0's data to the finished version a second time and set its bit again, so its next real
    set-0 update would be taken for a retransmission."""
    hosts = switch.testbed.hosts
    reduce_round(switch, slot=0, shadow_set=0, seeds=(1, 2), seq=10)
    switch.ports.send(0, update_frame(hosts[0], 0, 1, values(3, switch.k), JOB, seq=11))
    assert switch.ports.receive(0).total() == 0  # (waits until the switch is done with it)
    assert switch.control.register_read("SwitchMLIngress.bitmap", 0) == 0b10
    stale_copy_is_dropped(switch, update_frame(hosts[0], 0, 0, values(1, switch.k), JOB, seq=10))
    switch.ports.send(1, update_frame(hosts[1], 0, 1, values(4, switch.k), JOB, seq=11))
    assert len(switch.ports.receive(2).results(0)) == 1
    reduce_round(switch, slot=0, shadow_set=0, seeds=(5, 6), seq=12)


def test_retransmission_of_an_older_version_gets_no_result(switch: SwitchUnderTest) -> None:
    """A late retransmission of seq 10 into a cell now holding seq 12 (worker 0's bit set
    again) must not be answered with seq 12's sum."""
    hosts = switch.testbed.hosts
    reduce_round(switch, slot=0, shadow_set=0, seeds=(1, 2), seq=10)
    reduce_round(switch, slot=0, shadow_set=1, seeds=(3, 4), seq=11)
    reduce_round(switch, slot=0, shadow_set=0, seeds=(5, 6), seq=12)
    stale_copy_is_dropped(switch, update_frame(hosts[0], 0, 0, values(1, switch.k), JOB, seq=10))


def test_non_switchml_traffic_is_forwarded(switch: SwitchUnderTest) -> None:
    """Unknown destination floods (never back to the sender); a learned one is unicast."""
    hosts = switch.testbed.hosts
    to_host2 = Ether(src=hosts[0].mac, dst=hosts[2].mac) / IP(src=hosts[0].ipv4, dst=hosts[2].ipv4) / UDP(sport=1234, dport=switchml_params.WORKER_UDP_PORT) / b"hello"
    switch.ports.send(0, bytes(to_host2))
    received = switch.ports.receive(2)
    assert [len(received.frames[i]) for i in range(3)] == [0, 1, 1]
    assert bytes(received.frames[2][0]) == bytes(to_host2)
    assert learned_entries(switch.control, 1) == 1, "host 0's address was not learned"  # bmv2 learns a few ms late
    reply = Ether(src=hosts[2].mac, dst=hosts[0].mac) / IP(src=hosts[2].ipv4, dst=hosts[0].ipv4) / UDP(sport=1234, dport=switchml_params.WORKER_UDP_PORT) / b"back"
    switch.ports.send(2, bytes(reply))
    received = switch.ports.receive(1)
    assert [len(received.frames[i]) for i in range(3)] == [1, 0, 0], "host 0 was learned on port 1"
    assert bytes(received.frames[0][0]) == bytes(reply)
    counts = switch.counters()
    assert (counts["EV_FORWARDED"], counts["EGV_SENT"]) == (2, N_HOSTS - 1 + 1), "one flood to every other port, one unicast"


def test_vlan_tagged_frames_are_ordinary_traffic_and_keep_their_tag(switch: SwitchUnderTest) -> None:
    """The parser knows etherType 0x0800 only: a tagged update is flooded as it came, tag included.

    The kernel strips a received frame's tag before a packet socket sees it; both the
    switch and this capture must put it back to see the frame as it was on the wire.
    """
    hosts = switch.testbed.hosts
    for tpid, tci in ((0x8100, 0x2005), (0x88A8, 0x0000)):
        tagged = vlan_tagged(update_frame(hosts[0], 0, 0, values(1, switch.k), JOB), tci, tpid)
        switch.ports.send(0, tagged)
        received = switch.ports.receive(2)
        assert [[bytes(f) for f in received.frames[i]] for i in range(3)] == [[], [tagged], [tagged]]
    counts = switch.counters()
    assert (counts["EV_FORWARDED"], counts["EV_UPDATE_CONSUMED"], counts["EGV_SENT"]) == (2, 0, 2 * (N_HOSTS - 1))


UNKNOWN_MAC = "02:00:00:00:aa:01"
"""A unicast destination no frame ever comes from: flooded by every target, learning or not."""
WRONG_CHECKSUM = 0xBAD0


def test_forwarded_ipv4_leaves_with_its_header_checksum_recomputed(switch: SwitchUnderTest) -> None:
    """SwitchMLComputeChecksum: every departing packet with a parsed, option-less IPv4 header."""
    hosts = switch.testbed.hosts
    eth = Ether(src=hosts[0].mac, dst=UNKNOWN_MAC)
    udp = UDP(sport=1234, dport=4321) / b"payload"
    correct = bytes(eth / IP(src=hosts[0].ipv4, dst="10.0.1.1") / udp)
    wrong = bytes(eth / IP(src=hosts[0].ipv4, dst="10.0.1.1", chksum=WRONG_CHECKSUM) / udp)
    with_options = bytes(eth / IP(src=hosts[0].ipv4, dst="10.0.1.1", options=b"\x01\x01\x01\x00", chksum=WRONG_CHECKSUM) / udp)
    cases = [  # (sent, what must arrive)
        (wrong, correct),
        (wrong[: IPV4_OFFSET + 22], correct[: IPV4_OFFSET + 22]),  # IPv4 header complete, UDP cut
        (wrong[: IPV4_OFFSET + 16], wrong[: IPV4_OFFSET + 16]),  # IPv4 header cut: not parsed
        (with_options, with_options),  # ihl 6: the program does not checksum options
        (vlan_tagged(wrong, 7), vlan_tagged(wrong, 7)),  # tagged: not parsed as IPv4
    ]
    assert IP(correct[IPV4_OFFSET:]).chksum != WRONG_CHECKSUM
    for sent, expected in cases:
        switch.ports.send(0, sent)
        received = switch.ports.receive(2)
        assert [[bytes(f) for f in received.frames[i]] for i in range(3)] == [[], [expected], [expected]]


def test_frame_to_its_own_unlearned_source_is_flooded(switch: SwitchUnderTest) -> None:
    """The learn digest is answered after the packet: its own l2_table lookup misses."""
    mac = "02:00:00:00:cc:01"
    frame = bytes(Ether(src=mac, dst=mac) / IP(src="10.0.1.1", dst="10.0.1.2") / UDP(sport=1, dport=2))
    switch.ports.send(2, frame)
    received = switch.ports.receive(2)
    assert [[bytes(f) for f in received.frames[i]] for i in range(3)] == [[frame], [frame], []]


TRAILER = bytes(range(16))
"""Bytes after the IP packet (udp.length and totalLen do not count them), like Ethernet padding."""


@pytest.mark.every_k
def test_results_leave_without_the_updates_trailer_and_ordinary_frames_keep_theirs(switch: SwitchUnderTest) -> None:
    """A result is headers + switchml_h + k elements; a forwarded frame leaves as it came."""
    hosts = switch.testbed.hosts
    a, b = values(26, switch.k), values(27, switch.k)
    switch.ports.send(0, update_frame(hosts[0], 8, 0, a, JOB) + TRAILER)
    switch.ports.send(1, update_frame(hosts[1], 8, 0, b, JOB) + TRAILER)
    multicast = switch.ports.receive(2)
    switch.ports.send(0, update_frame(hosts[0], 8, 0, a, JOB) + TRAILER)  # retransmission
    unicast = switch.ports.receive(1)
    for received, index in ((multicast, 0), (multicast, 1), (unicast, 0)):
        check_result(switch, received, index, slot=8, shadow_set=0, seq=0, expected=a + b, exponent=0)
        assert len(received.results(index)[0]) == frame_bytes(switch.k)
    ordinary = bytes(Ether(src=hosts[0].mac, dst=UNKNOWN_MAC) / IP(src=hosts[0].ipv4, dst="10.0.1.1") / UDP(sport=1, dport=2)) + TRAILER
    switch.ports.send(0, ordinary)
    received = switch.ports.receive(2)
    assert [[bytes(f) for f in received.frames[i]] for i in range(3)] == [[], [ordinary], [ordinary]]


RESET_TRIALS = 5
REOPENED_SEQ = 3


def flood(switch: SwitchUnderTest, index: int, frames: list[bytes], stop: threading.Event) -> None:
    """Send ``frames`` from host ``index`` round and round until ``stop`` is set."""
    while not stop.is_set():
        for frame in frames:
            switch.ports.send(index, frame)


def test_a_reset_while_updates_arrive_leaves_every_cell_consistent(switch: SwitchUnderTest) -> None:
    """bmv2 reset register by register through Thrift: an update that arrived between the
    reset of ``count`` and that of ``seq`` opened a version whose seq was then zeroed under
    it (seen: bitmap 0x1FFFF, count 17, seq 0), and every later update of that slot was
    dropped as stale until the next reset. A reset must be atomic with respect to traffic
    (docs/dataplane.md): afterwards a cell holds nothing, or the whole of a version that
    updates opened (its bit, a count of at least its bits, their seq)."""
    rank0 = JOB_HOSTS[JOB][0]
    frames = [update_frame(switch.testbed.hosts[rank0], slot, 0, [1] * switch.k, JOB, seq=REOPENED_SEQ) for slot in range(JOB_POOL)]
    cells = [shadow_set * switchml_params.MAX_POOL_SIZE + slot for shadow_set in (0, 1) for slot in range(JOB_POOL)]
    for trial in range(RESET_TRIALS):
        stop = threading.Event()
        sender = threading.Thread(target=flood, args=(switch, rank0, frames, stop), daemon=True)
        sender.start()
        try:
            time.sleep(0.05)  # every cell of set 0 opened by rank 0, and its updates still coming
            programming.reset_aggregation_state(switch.control, switch.k)
        finally:
            stop.set()
            sender.join()
        time.sleep(0.05)  # the switch has taken in what was sent
        bitmap, count, seq = (switch.control.register_read(register) for register in
                              (programming.BITMAP_REGISTER, programming.COUNT_REGISTER, programming.SEQ_REGISTER))
        broken = {cell: (bitmap[cell], count[cell], seq[cell]) for cell in cells  # type: ignore[index]
                  if (bitmap[cell] != 0 and (seq[cell] != REOPENED_SEQ or count[cell] < bin(bitmap[cell]).count("1")))  # type: ignore[index]
                  or (bitmap[cell] == 0 and count[cell] != 0)}  # type: ignore[index]
        assert not broken, f"trial {trial}: cells (bitmap, count, seq) left half reset: {broken}"
        programming.reset_aggregation_state(switch.control, switch.k)  # quiet: the next trial starts from empty cells
