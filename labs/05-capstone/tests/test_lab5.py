"""Lab 5: the training-speedup model at its two limits."""

from __future__ import annotations

import pytest

from analysis import models


def test_communication_bound_training_gains_the_all_reduce_speedup() -> None:
    assert models.training_speedup(0.0, 3.5, 2.0) == pytest.approx(1.75)
    assert models.expected_training_speedup_over_ring(0.0, 1.0, 4) == pytest.approx(1.5)


def test_compute_bound_training_gains_almost_nothing() -> None:
    assert models.training_speedup(100.0, 0.7, 0.4) == pytest.approx(100.7 / 100.4), "an iteration is compute plus all-reduce, with either"
    assert models.expected_training_speedup_over_ring(100.0, 0.7, 8) == pytest.approx(100.7 / 100.4)
