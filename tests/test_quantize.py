"""Property tests of SwitchML's block floating-point quantization (protocol/quantize.py)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from protocol.quantize import (
    INT32_MAX,
    block_exponents,
    element_scales,
    error_bound,
    expected_sum,
    quantize,
    quantized_limit,
    scale_for,
)

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

K = 8
EXTREME = float(np.float32(1e30))
TINY = 1e-30
FLT_MIN = 2.0**-126


def _log_uniform(sign: float, log10: float) -> float:
    return float(np.float32(sign * 10.0**log10))


MAGNITUDES = st.one_of(
    st.just(0.0),
    st.floats(-FLT_MIN, FLT_MIN, width=32, allow_subnormal=True),  # denormals
    st.builds(_log_uniform, st.sampled_from([-1.0, 1.0]), st.floats(np.log10(TINY), np.log10(EXTREME))),
    st.floats(-EXTREME, EXTREME, width=32, allow_subnormal=True),
)
"""Zeros, denormals, and 1e-30..1e30 of either sign, so one block mixes scales."""


@st.composite
def worker_tensors(draw: st.DrawFn, n: int | None = None) -> list[np.ndarray]:
    n = draw(st.integers(1, 32)) if n is None else n
    length = draw(st.integers(1, 3 * K))
    return list(draw(arrays(np.float32, (n, length), elements=MAGNITUDES)))


def exact_sum(inputs: list[np.ndarray], i: int) -> Fraction:
    return sum((Fraction(float(x[i])) for x in inputs), Fraction(0))


@settings(max_examples=150, deadline=None)
@given(worker_tensors())
def test_error_bound_holds_against_the_exact_sum(inputs: list[np.ndarray]) -> None:
    n = len(inputs)
    result = expected_sum(inputs, K, n)
    bound = error_bound(result.scale, n, result.values)
    for i in range(len(inputs[0])):
        error = abs(Fraction(float(result.values[i])) - exact_sum(inputs, i))
        assert error <= Fraction(float(bound[i])), f"element {i}: error {float(error)} > bound {bound[i]}"


@settings(max_examples=150, deadline=None)
@given(worker_tensors())
def test_expected_sum_matches_a_float64_sum(inputs: list[np.ndarray]) -> None:
    """The float64 sum has its own rounding error, at most (n-1) 2^-53 sum|x|."""
    n = len(inputs)
    stacked = np.stack(inputs).astype(np.float64)
    direct = stacked.sum(axis=0)
    result = expected_sum(inputs, K, n)
    slack = (n - 1) * 2.0**-53 * np.abs(stacked).sum(axis=0)
    assert np.all(np.abs(result.values - direct) <= error_bound(result.scale, n, result.values) + slack)


def _same_value(v: float) -> list[np.ndarray]:
    return [np.full(K, v, dtype=np.float32)] * 32


@settings(max_examples=80, deadline=None)
@given(worker_tensors(n=32))
@example(_same_value(2.0**99))  # x * f == M exactly: the largest possible quantized value
@example(_same_value(-(2.0**-126)))
@example(_same_value(float(np.nextafter(np.float32(2.0**100), np.float32(0)))))  # rounds up towards M
@example(_same_value(float(np.nextafter(np.float32(2.0**127), np.float32(0)))))  # largest accepted value
def test_no_overflow_with_32_workers(inputs: list[np.ndarray]) -> None:
    n = len(inputs)
    e_max = np.max(np.stack([block_exponents(x, K) for x in inputs]), axis=0)
    scale = element_scales(e_max, n, K, len(inputs[0]))
    quantized = np.stack([quantize(x, scale) for x in inputs]).astype(np.int64)
    assert np.abs(quantized).max() <= INT32_MAX // n
    total = quantized.sum(axis=0)
    assert np.abs(total).max() <= INT32_MAX
    np.testing.assert_array_equal(expected_sum(inputs, K, n).int_sum, total)


@settings(max_examples=200, deadline=None)
@given(arrays(np.float32, st.integers(1, 3 * K), elements=MAGNITUDES))
def test_block_exponent_is_the_smallest_bounding_power_of_two(x: np.ndarray) -> None:
    exponents = block_exponents(x, K)
    assert len(exponents) == -(-len(x) // K)
    for b, e in enumerate(exponents.tolist()):
        m = float(np.abs(x[b * K : (b + 1) * K]).max())
        assert m <= 2.0**e
        assert e == -128 or 2.0 ** (e - 1) < m


@pytest.mark.parametrize(
    ("value", "shown"),
    [(np.nan, "nan: not finite"), (np.inf, "inf: not finite"), (-np.inf, "-inf: not finite"),
     (2.0**127, "1.7014118346046923e+38: |x| >= 2^127"), (-3e38, "-3.0000000054977558e+38: |x| >= 2^127")],
)
def test_unquantizable_values_are_rejected_by_index(value: float, shown: str) -> None:
    x = np.ones(20, dtype=np.float32)
    x[13] = value
    x[17] = np.nan  # only the first bad element is named
    with pytest.raises(ValueError, match=r"element 13 = " + shown.replace("+", r"\+").replace("^", r"\^")):
        expected_sum([np.ones(20, dtype=np.float32), x], K, 2)


def test_int32_sum_wraps_like_the_switch() -> None:
    values = [2**31 - 1, 2**31 - 1, -(2**31), 12345]
    inputs = [np.array([v, -v - 1, 1], dtype=np.int32) for v in values]
    result = expected_sum(inputs, K, 4)
    for i in range(3):
        true_sum = sum(int(x[i]) for x in inputs)
        assert int(result.int_sum[i]) == (true_sum + 2**31) % 2**32 - 2**31
    assert result.values is result.int_sum and result.scale is None


def test_inputs_must_agree() -> None:
    with pytest.raises(ValueError, match="one tensor per worker"):
        expected_sum([np.ones(3, dtype=np.float32)], K, 2)
    with pytest.raises(ValueError, match="lengths"):
        expected_sum([np.ones(3, dtype=np.float32), np.ones(4, dtype=np.float32)], K, 2)
    with pytest.raises(TypeError, match="float64"):
        expected_sum([np.ones(3)], K, 1)


# fewer bits (the training workload's ablation)


def test_default_bits_is_the_protocols_scale() -> None:
    exponents = np.array([-3, 0, 5], dtype=np.int8)
    for n in (1, 3, 8, 32):
        np.testing.assert_array_equal(scale_for(exponents, n), np.ldexp(float(INT32_MAX // n), -exponents.astype(int)))
        np.testing.assert_array_equal(scale_for(exponents, n, bits=32), scale_for(exponents, n))


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 16).flatmap(lambda n: st.tuples(worker_tensors(n=n), st.integers(max(2, n.bit_length() + 1), 31))))
def test_fewer_bits_fit_their_width_and_keep_the_error_bound(case: tuple[list[np.ndarray], int]) -> None:
    """b-bit quantized values and their sums fit a signed b-bit integer; error_bound still holds."""
    inputs, bits = case
    n = len(inputs)
    limit = quantized_limit(n, bits)
    result = expected_sum(inputs, K, n, bits)
    quantized = np.stack([quantize(x, result.scale) for x in inputs]).astype(np.int64)
    assert np.abs(quantized).max() <= limit
    assert np.abs(result.int_sum.astype(np.int64)).max() <= 2 ** (bits - 1) - 1
    bound = error_bound(result.scale, n, result.values)
    for i in range(len(inputs[0])):
        error = abs(Fraction(float(result.values[i])) - exact_sum(inputs, i))
        assert error <= Fraction(float(bound[i]))


def test_too_few_bits_for_the_workers_are_rejected() -> None:
    assert quantized_limit(8, 5) == 1  # floor(15 / 8): every worker keeps one level per sign
    with pytest.raises(ValueError, match="no quantization level for 8 workers"):
        quantized_limit(8, 4)
    with pytest.raises(ValueError, match="bits must be 2..32"):
        quantized_limit(2, 33)


def test_flushed_to_zero_counts_the_nonzero_elements_that_quantize_to_0() -> None:
    """Issue 44's example over 4 workers: beside 1e20 in the block, 1e-20, -3.5 and 123456.789
    (times the rank + 1) are more than 2^31 / 4 times smaller, and each worker loses all three;
    the sum comes back [0, 1e21, 0, 0, 0]. Across blocks the count is per block's exponent."""
    from protocol.quantize import flushed_to_zero

    xs = [np.array([1e-20, 1e20, -3.5, 0, 123456.789], dtype=np.float32) * np.float32(r + 1) for r in range(4)]
    want = expected_sum(xs, 256, 4)
    assert want.values[[0, 2, 3, 4]].tolist() == [0.0] * 4 and want.values[1] == np.float32(1e21)
    assert [flushed_to_zero(x, want.exponents, 4, 256) for x in xs] == [3, 3, 3, 3]
    split = [flushed_to_zero(x, expected_sum(xs, 2, 4).exponents, 4, 2) for x in xs]  # blocks [1e-20, 1e20], [-3.5, 0], [123456.789]
    assert split == [1, 1, 1, 1]


def test_flushed_to_zero_counts_a_tensor_of_many_rows_as_one() -> None:
    from protocol.quantize import FLUSH_ROWS, element_scales, flushed_to_zero

    rng = np.random.default_rng(3)
    x = (rng.standard_normal(2 * FLUSH_ROWS * 2 + 3) * 10.0 ** rng.integers(-12, 12, 2 * FLUSH_ROWS * 2 + 3)).astype(np.float32)
    x[::7] = 0
    exponents = expected_sum([x, x[::-1].copy()], 2, 2).exponents
    whole = np.count_nonzero(quantize(x, element_scales(exponents, 2, 2, len(x))) == 0) - np.count_nonzero(x == 0)
    assert whole > 0 and flushed_to_zero(x, exponents, 2, 2) == whole
