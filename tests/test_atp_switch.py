"""ATP's embedded pipeline: the behaviour cases of atp-protocol.md, and what only the reference model shows.

The switch-level cases are tests/atp_switch_cases.py's, run here on the embedded pipeline
(the ``switch`` fixture) as test_atp_ebpf.py runs them on the eBPF program. This file adds
the cases that span the hosts on ATPNetwork (8) or the PS alone (9), ECN from the queue the
pipeline is given, the PS's byte order, the scapy layer, the documented names, and a
property test of isolation and exactness under any order of frames.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from atp_switch_cases import (  # noqa: F401 (collected here: the cases run on this module's switch)
    JOB_PORTS,
    K,
    N,
    POOL,
    decode,
    program,
    result,
    test_a_duplicate_after_completion_goes_to_the_ps_again_with_the_stored_sums,
    test_a_duplicate_before_completion_is_dropped_and_counted_once,
    test_a_lost_result_ends_in_a_timeout_resend_answered_from_the_stored_result,
    test_a_resend_flushes_the_partial_sum_to_the_ps_and_frees_the_aggregator,
    test_a_resend_on_someone_elses_aggregator_passes_through_untagged,
    test_a_result_that_does_not_own_the_aggregator_frees_nothing_but_still_reaches_the_workers,
    test_another_job_on_a_taken_aggregator_is_tagged_and_goes_to_its_own_ps,
    test_ecn_on_one_contribution_reaches_every_worker_and_halves_its_window,
    test_n_contributions_make_a_full_sum_to_the_ps_whose_result_frees_and_multicasts,
    test_one_worker_jobs_sum_without_the_reference_codes_stale_values,
    test_other_traffic_is_forwarded_by_l2,
    test_overflow_packets_pass_through_to_the_ps_untouched,
    test_packets_the_switch_cannot_trust_are_counted_and_change_nothing,
    test_the_next_sequence_on_a_freed_aggregator_claims_it_and_overwrites_the_old_sums,
    test_the_ps_sums_a_collided_sequence_and_the_workers_adopt_the_new_index_it_names,
    update,
    vals,
)
from atp_switch_driver import EmbeddedATPSwitch, egress_packets, ingress_events
from hosts.atp.parameter_server import ParameterServerCore
from protocol.atp import params
from protocol.atp.packet import ATPHeader, decode_payload, encode_payload
from protocol.packet import IPV4_OFFSET, ipv4_checksum
from protocol.params import REPO_ROOT
from switches.embedded.atp.pipeline import ATPPipeline


@pytest.fixture
def switch() -> Iterator[EmbeddedATPSwitch]:
    embedded = EmbeddedATPSwitch(K, POOL)
    program(embedded)
    yield embedded

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
    switch = EmbeddedATPSwitch(K, POOL, queue_depth=lambda port: depth.get(port, 0))
    program(switch)
    switch.control.register_write("ATPEgress.ecn_threshold", 0, 10)
    [(_, calm)] = switch.process(*update(1, 0, 1, 5, vals(1), params.FLAG_RESEND))
    depth[3] = 10
    [(_, congested)] = switch.process(*update(1, 0, 2, 5, vals(1), params.FLAG_RESEND))
    assert not decode(calm)[0].flags & params.FLAG_ECN and calm[IPV4_OFFSET + 1] & 0b11 == 0
    assert decode(congested)[0].flags & params.FLAG_ECN and congested[IPV4_OFFSET + 1] & 0b11 == 0b11
    assert ipv4_checksum(congested, IPV4_OFFSET) == int.from_bytes(congested[IPV4_OFFSET + 10:IPV4_OFFSET + 12], "big")
    assert egress_packets(switch) == [2, 1]


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
    switch = EmbeddedATPSwitch(K, 3)
    program(switch)

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
    assert sum(ingress_events(switch).values()) == len(operations), "every frame counted under exactly one event"
