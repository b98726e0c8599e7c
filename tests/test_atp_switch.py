"""ATP's embedded pipeline: the behaviour cases of atp-protocol.md, and what only the reference model shows.

The cases that involve the switch are tests/atp_switch_cases.py's, run here on the embedded
pipeline (``TestSwitchCases`` and the ``switch`` fixture) as tests/test_atp_bmv2.py and
tests/test_atp_ebpf.py run them on bmv2 and eBPF. This file adds the case of the PS alone (9),
ECN from the queue the pipeline is given, the PS's byte order, the scapy layer, the documented
names, and a property test of isolation and exactness under any order of frames.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atp_switch_cases import JOB_PORTS, K, N, POOL, SwitchCases, decode, program, result, update, vals
from atp_switch_driver import EmbeddedATPSwitch
from hosts.atp.parameter_server import ParameterServerCore
from protocol.atp import params
from protocol.atp.packet import ATPHeader, decode_payload, encode_payload
from protocol.packet import IPV4_OFFSET, ipv4_checksum
from protocol.params import REPO_ROOT
from switches.embedded.atp.pipeline import ATPPipeline

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)


@pytest.fixture
def switch() -> EmbeddedATPSwitch:
    return program(EmbeddedATPSwitch(K, POOL))


class TestSwitchCases(SwitchCases):
    """atp_switch_cases's cases on the reference pipeline."""


# 9
def test_the_ps_discards_a_part_whose_bits_it_already_has() -> None:
    ps = ParameterServerCore(1, N, K, POOL)

    def part(bitmap: int, values: np.ndarray, flags: int = 0) -> list[bytes]:
        return ps.receive(encode_payload(ATPHeader(bitmap, N, flags, 1, 1, 5, params.NO_INDEX), values))

    assert part(0b001, vals(1), params.FLAG_COLLISION) == []
    assert part(0b011, vals(1) + vals(2), params.FLAG_RESEND) == [], "overlaps bit 0: discarded whole"
    assert part(0b010, vals(2)) == []
    [done] = part(0b100, vals(3))
    assert np.array_equal(decode_payload(done, K)[1], vals(1) + vals(2) + vals(3))
    assert ps.stats.discarded == 1 and ps.stats.sequences_from_parts == 1


def test_egress_marks_ecn_from_the_queue_it_is_given() -> None:
    depth = {3: 0}
    switch = program(EmbeddedATPSwitch(K, POOL, queue_depth=lambda port: depth.get(port, 0)))
    switch.set_ecn_threshold(10)
    [(_, calm)] = switch.process(*update(1, 0, 1, 5, vals(1), params.FLAG_RESEND))
    depth[3] = 10
    [(_, congested)] = switch.process(*update(1, 0, 2, 5, vals(1), params.FLAG_RESEND))
    assert not decode(calm)[0].flags & params.FLAG_ECN and calm[IPV4_OFFSET + 1] & 0b11 == 0
    assert decode(congested)[0].flags & params.FLAG_ECN and congested[IPV4_OFFSET + 1] & 0b11 == 0b11
    assert ipv4_checksum(congested, IPV4_OFFSET) == int.from_bytes(congested[IPV4_OFFSET + 10:IPV4_OFFSET + 12], "big")
    assert switch.egress_packets() == [2, 1, 0]


def test_the_ps_sends_a_stored_result_again_byte_for_byte() -> None:
    ps = ParameterServerCore(1, N, K, POOL)
    full = encode_payload(ATPHeader(0b111, N, 0, 1, 1, 5, params.NO_INDEX), vals(1))
    [first] = ps.receive(full)
    resend = encode_payload(ATPHeader(0b001, N, params.FLAG_RESEND, 1, 1, 5, params.NO_INDEX), vals(2))
    assert ps.receive(resend) == [first] and ps.receive(resend) == [first]
    assert np.array_equal(decode_payload(first, K)[1], vals(1)) and ps.stats.results_repeated == 2


def test_every_table_register_and_counter_is_named_in_docs_dataplane_atp() -> None:
    """The names the P4 and eBPF programs will mirror are written down where they will read them."""
    doc = (REPO_ROOT / "docs" / "dataplane-atp.md").read_text()
    schema = ATPPipeline(K, POOL).schema()
    names = {*schema.tables, *schema.counters, *(n for n in schema.registers if ".value_" not in n), *params.INGRESS_EVENTS,
             *params.EGRESS_EVENTS}
    missing = sorted(name for name in names if f"`{name.rpartition('.')[2]}`" not in doc)
    assert not missing, f"not in docs/dataplane-atp.md: {missing}"
    for table in (schema.tables[name] for name in schema.tables):
        for action, fields in table.actions.items():
            assert f"{action}(" in doc, action
            for field in fields:
                assert f"bit<{field.bits}> {field.name}" in doc, (action, field)


def test_the_scapy_layer_and_the_hot_path_read_the_same_bytes() -> None:
    from scapy.layers.l2 import Ether

    from protocol.atp.scapy_layer import ATP

    port, frame = update(2, 1, 77, 9, vals(5), params.FLAG_RESEND | params.FLAG_ECN)
    layer = Ether(frame)[ATP]
    header, values = decode(frame)
    assert (layer.bitmap, layer.fan_in, int(layer.flags), layer.app_id, layer.seq, layer.agtr, layer.new_agtr) == tuple(header)
    assert layer.values == values.tolist() and bytes(Ether(frame)) == frame


OPERATIONS = st.lists(st.tuples(st.sampled_from([1, 2]), st.integers(0, N - 1), st.integers(0, 2), st.integers(0, 1),
                                st.sampled_from(["send", "resend", "result"])), max_size=60)


@settings(max_examples=300, deadline=None)
@given(operations=OPERATIONS)
def test_whatever_arrives_in_whatever_order_the_ps_gets_only_its_jobs_true_partial_sums(operations: list) -> None:
    """Every frame the switch sends a PS carries that job's sequence, and values that are exactly
    the sum of the contributions its bitmap names: isolation and exactness, whatever the order."""
    switch = program(EmbeddedATPSwitch(K, 3))

    def contribution(app_id: int, w: int, seq: int) -> np.ndarray:
        return vals(app_id * 100 + w * 10 + seq)

    for app_id, w, seq, agtr, kind in operations:
        if kind == "result":
            frames = switch.process(*result(app_id, seq, agtr, vals(0)))
            assert sorted(port for port, _ in frames) == (JOB_PORTS[app_id][0] if seq else []), "sequence 0 is malformed"
            continue
        flags = params.FLAG_RESEND if kind == "resend" else 0
        for port, frame in switch.process(*update(app_id, w, seq, agtr, contribution(app_id, w, seq), flags)):
            header, values = decode(frame)
            assert port == JOB_PORTS[app_id][1] and (header.app_id, header.seq) == (app_id, seq)
            expected = sum(contribution(app_id, bit, seq) for bit in range(N) if header.bitmap >> bit & 1)
            assert header.bitmap >> N == 0 and np.array_equal(values, expected)
    assert sum(switch.events().values()) == len(operations), "every frame counted under exactly one event"
