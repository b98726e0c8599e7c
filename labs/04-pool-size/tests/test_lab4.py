"""Lab 4: the pool-size model, on lab 4's own link (2.5 Mbit/s, 10 ms, k = 32)."""

from __future__ import annotations

import math

import pytest

from analysis.switchml import models

LINK_BPS, K, DELAY_S = 2.5e6, 32, 0.010


def test_round_trip_of_one_slot() -> None:
    # a 183-byte frame takes 0.5856 ms at 2.5 Mbit/s; update out and result back, 10 ms each way
    assert models.slot_round_trip_s(LINK_BPS, K, DELAY_S) == pytest.approx(2 * (183 * 8 / 2.5e6 + 0.010)), (
        "a round trip: the update up and the result back, each a serialisation plus the link delay"
    )
    assert models.slot_round_trip_s(LINK_BPS, K, 0.0) == pytest.approx(2 * 183 * 8 / 2.5e6)


def test_small_pools_are_window_limited_large_ones_line_rate_limited() -> None:
    rtt = models.slot_round_trip_s(LINK_BPS, K, DELAY_S)
    line_rate = models.switchml_line_rate_ate(LINK_BPS, K)
    assert models.switchml_pool_bound_ate(LINK_BPS, K, 8, rtt) == pytest.approx(8 * 32 / rtt)
    assert models.switchml_pool_bound_ate(LINK_BPS, K, 128, rtt) == pytest.approx(line_rate)
    knee = math.ceil(line_rate / K * rtt)  # the bandwidth-delay product in frames: 37
    assert knee == 37
    assert models.switchml_pool_bound_ate(LINK_BPS, K, knee - 1, rtt) < line_rate
    assert models.switchml_pool_bound_ate(LINK_BPS, K, knee, rtt) == pytest.approx(line_rate)


@pytest.mark.parametrize("call", [
    lambda: models.slot_round_trip_s(2.5e6, 32, -0.001),
    lambda: models.switchml_pool_bound_ate(2.5e6, 32, 0, 0.02),
])  # fmt: skip
def test_meaningless_inputs_are_rejected(call) -> None:
    with pytest.raises(ValueError):
        call()
