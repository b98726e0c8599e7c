"""Lab 0: SwitchML's line-rate bound, against the numbers of the main job (README.md)."""

from __future__ import annotations

import pytest

from analysis.switchml import models


def test_bound_of_the_main_job() -> None:
    # 2.5 Mbit/s, k = 32: frames of 14 + 20 + 8 + 13 + 128 = 183 bytes, 128 of them elements:
    # 2.5e6 * (128 / 183) / 32 = 54,645 elements/s, the README's "bound ATE/s"
    assert models.switchml_line_rate_ate(2.5e6, 32) == pytest.approx(54644.81, rel=1e-6), "k elements per frame_bytes(k) * 8 bits of link"


def test_bound_grows_with_k_towards_the_link_rate_in_elements() -> None:
    # k = 1: a frame of 59 bytes carries 4 of them; k = 1024: 4151 bytes carry 4096
    rates = [models.switchml_line_rate_ate(1e6, k) for k in (1, 1024)]
    assert rates == pytest.approx([1e6 * 4 / 59 / 32, 1e6 * 4096 / 4151 / 32])
    assert rates[1] < 1e6 / 32, "headers always cost something"
