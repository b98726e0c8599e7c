"""Lab 1: block-exponent quantization on numbers small enough to check by hand."""

from __future__ import annotations

import numpy as np

from protocol import quantize


def test_block_exponents_by_hand() -> None:
    x = np.array([0.75, -0.5, 3.0, 4.0, 0.0, 0.0], dtype=np.float32)
    # blocks of 2: max 0.75 -> 2^0 (2^-1 < 0.75); max 4.0 -> exactly 2^2; all zero -> -128
    assert quantize.block_exponents(x, 2).tolist() == [0, 2, -128]
    assert quantize.block_exponents(x, 2).dtype == np.int8


def test_limit_leaves_room_for_every_worker() -> None:
    assert quantize.quantized_limit(4) == 536_870_911, "floor((2^31 - 1) / n): n values at the limit must add up without overflow"
    assert quantize.quantized_limit(3, bits=8) == 42  # floor(127 / 3)
    assert 4 * quantize.quantized_limit(4) <= 2**31 - 1


def test_quantize_rounds_half_to_even_into_the_buffer_given() -> None:
    out = np.zeros(4, dtype=">i4")  # a big-endian view, as in a packet buffer
    result = quantize.quantize(np.array([0.5, 1.5, 2.5, -0.5]), 1.0, out=out)
    assert result is out, "quantize writes into out when given, and returns it"
    assert out.tolist() == [0, 2, 2, 0], "ties round half to even (0.5 -> 0, 1.5 -> 2, 2.5 -> 2)"
    assert quantize.quantize(np.array([0.75], dtype=np.float32), 536_870_911.0).tolist() == [402_653_183]


def test_quantize_takes_a_block_of_packets_with_a_scale_per_packet() -> None:
    """The worker quantizes a block of packets at once: x of shape (packets, k), the scale a
    column (packets, 1), out and work of x's shape. A 1-D-only answer passed every other
    test of the lab and failed the end-to-end one with a numpy error that did not name quantize."""
    x = np.array([[0.5, 1.5, -2.5], [0.25, -0.75, 1.0]])
    out, work = np.zeros((2, 3), dtype=">i4"), np.empty((2, 3))
    assert quantize.quantize(x, np.array([[2.0], [4.0]]), out=out, work=work) is out, "the block is written into out, which is returned"
    assert out.tolist() == [[1, 3, -5], [1, -3, 4]], "row i is scaled by scale[i, 0]"


def test_sum_of_n_workers_at_the_limit_does_not_overflow() -> None:
    n = 7
    x = np.full(5, 2.0, dtype=np.float32)  # exactly 2^1: every worker at the largest value
    expected = quantize.expected_sum([x] * n, k=5, n=n)
    assert expected.int_sum.tolist() == [n * quantize.quantized_limit(n)] * 5
    assert expected.values.tolist() == [14.0] * 5
