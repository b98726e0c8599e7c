"""Block floating-point quantization with one-step exponent lookahead (SwitchML §3.5).

The switch only adds int32s, so a float32 tensor travels as integers: every block of k
elements (one packet) gets an exponent ``e`` with ``2^e >= max|x|``; the switch keeps the
maximum exponent over workers, and every worker then scales the block by the same factor
``f = floor(INT32_MAX / n) / 2^e_max`` before sending ``round(x * f)``. The aggregated
integer sum ``S`` is turned back into floats as ``S / f``.

This module is the one implementation of that arithmetic. The worker library calls it per
packet on the hot path (hence the ``out``/``work`` arguments), and the testbed's verifier
calls ``expected_sum`` to reproduce, bit for bit, the integer sum a correct switch must
produce.

Why the floor makes overflow impossible
---------------------------------------
Let ``M = floor(INT32_MAX / n)`` (an integer) and ``|x| <= 2^e_max``. Then
``|x * f| = |x| * M / 2^e_max <= M`` exactly. The float64 product ``fl(x * f)`` is rounded to
nearest and rounding is monotonic, and ``M`` (< 2^31) is representable, so
``|fl(x * f)| <= M`` too; rounding to the nearest integer cannot go past the integer ``M``
either. So every quantized value lies in ``[-M, M]`` and any n of them sum to at most
``n * M <= INT32_MAX`` in magnitude: the switch's wrapping int32 add never wraps. Without
the floor (``f = INT32_MAX / (n 2^e_max)``), ``x * f`` could be ``INT32_MAX / n`` with a
fractional part >= 1/2 that rounds up, and n such values overflow.

Fewer bits (ablation)
---------------------
``bits`` b < 32 emulates a switch whose adders are b bits wide: the scale becomes
``f = floor((2^(b-1) - 1) / n) / 2^e_max``, so every quantized value lies in
``[-floor((2^(b-1)-1)/n), +floor(...)]`` and n of them fit a signed b-bit integer by the same
argument as above. The switch still adds int32 (the sums are small enough), so a b-bit
quantization is only a coarser scale: the arithmetic, the verifier and the error bound are
the same functions. The default ``bits = 32`` is the protocol's own scale, bit for bit.

Integer tensors
---------------
int32 tensors are aggregated unscaled: the switch adds them with wrapping 32-bit
arithmetic, so the result is the true sum reduced modulo 2^32 into [-2^31, 2^31)
(two's complement), exactly what ``expected_sum`` returns for int32 inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from protocol.packet import EXPONENT_MAX, EXPONENT_MIN

INT32_MAX = 2**31 - 1
VALUE_LIMIT = 2.0**EXPONENT_MAX
"""Quantizable floats satisfy |x| < 2^127: a larger block exponent does not fit int8."""
ZERO_BLOCK_EXPONENT = EXPONENT_MIN
"""Exponent of an all-zero block: the smallest, so it never raises another worker's max."""

UNSUMMABLE_EXPONENT = EXPONENT_MAX
"""The block exponent a worker sends in the lookahead round for a block the switch cannot
sum: one that holds an inf or a NaN, or an element whose own exponent would be this one
(|x| > 2^126), which no finite block then uses. It is the largest exponent, so the switch's
maximum carries it to every worker of the job: all learn at the same call that the tensor
needs another route, and none waits for a rank that could not send it
(hosts/switchml/core.py, ``UnsummableTensor``)."""

PRODUCT_ERROR = 2.0**-22
"""Bound on |fl(x * f) - x * f|: float64 rounds to 2^-53 relative and |x * f| <= 2^31."""


@dataclass(frozen=True)
class ExpectedSum:
    """What a correct switch produces for one job.

    ``int_sum`` is the int32 sum that must match the switch bit for bit; ``values`` is the
    all-reduce result (float32 for float inputs, equal to ``int_sum`` for int32 inputs);
    ``exponents`` (per block, the max over workers) and ``scale`` (per element) are None
    for int32 inputs.
    """

    int_sum: np.ndarray
    values: np.ndarray
    exponents: np.ndarray | None
    scale: np.ndarray | None


def check_quantizable(x: np.ndarray) -> None:
    """Raise ValueError naming the first element that is NaN, infinite or >= 2^127 in magnitude.

    The common case, a tensor that is fine, costs two reductions and no temporary (every
    worker checks its whole tensor at the start of every all-reduce); only a bad one is
    searched for the first offender."""
    if len(x) == 0 or np.maximum(np.max(x), -np.min(x)) < VALUE_LIMIT:  # NaN anywhere makes the peak NaN: not <
        return
    bad = ~np.isfinite(x)
    np.greater_equal(np.abs(x), VALUE_LIMIT, out=bad, where=~bad)
    index = int(np.argmax(bad))
    value = float(x[index])
    reason = "not finite" if not np.isfinite(value) else "|x| >= 2^127, beyond the int8 block exponent"
    raise ValueError(f"cannot quantize element {index} = {value!r}: {reason}")


def block_exponents(x: np.ndarray, k: int) -> np.ndarray:
    """Per block of k elements (the last may be shorter): the smallest e with 2^e >= max|x|.

    Clamped to the int8 range: an all-zero block gets -128, and so does a block of values
    below 2^-128 (denormals), for which 2^-128 still bounds max|x|. Validates ``x`` first.
    """
    check_quantizable(x)
    if len(x) == 0:
        return np.zeros(0, dtype=np.int8)
    # BEGIN LAB 1: per block of k, the smallest e with 2^e >= max|x| as int8 (all-zero block: -128, clamp to int8)
    whole = len(x) - len(x) % k  # the blocks as rows; the short last one, if any, apart
    rows = x[:whole].reshape(-1, k)
    block_max = np.maximum(rows.max(axis=1, initial=0), -rows.min(axis=1, initial=0)).astype(np.float64)  # max|x|, no |x| copy
    if whole < len(x):
        block_max = np.append(block_max, max(float(x[whole:].max()), -float(x[whole:].min())))
    mantissa, exponent = np.frexp(block_max)  # block_max = mantissa * 2^exponent, mantissa in [0.5, 1)
    exponent = np.where(mantissa == 0.5, exponent - 1, exponent)  # an exact power of two is its own bound
    exponent = np.where(block_max == 0.0, ZERO_BLOCK_EXPONENT, exponent)
    return np.clip(exponent, EXPONENT_MIN, EXPONENT_MAX).astype(np.int8)
    # END LAB 1


PROTOCOL_BITS = 32
"""Width of the switch's adders: quantization uses the whole int32 range by default."""


def quantized_limit(n_workers: int, bits: int = PROTOCOL_BITS) -> int:
    """floor((2^(bits-1) - 1) / n): the largest |quantized value| of one worker.

    Raises ValueError when the range leaves fewer than one level per worker (then every
    value would quantize to 0) or ``bits`` is outside 2..32.
    """
    if n_workers < 1:
        raise ValueError(f"n_workers must be >= 1, got {n_workers}")
    if not 2 <= bits <= PROTOCOL_BITS:
        raise ValueError(f"bits must be 2..{PROTOCOL_BITS}, got {bits}")
    # BEGIN LAB 1: the largest |value| one worker may send so that n of them never overflow a signed bits-bit sum
    limit = (2 ** (bits - 1) - 1) // n_workers
    # END LAB 1
    if limit < 1:
        raise ValueError(f"{bits}-bit sums leave no quantization level for {n_workers} workers (need 2^{bits - 1} - 1 >= n)")
    return limit


def scale_for(exponent: np.ndarray | int, n_workers: int, bits: int = PROTOCOL_BITS) -> np.ndarray:
    """f = floor((2^(bits-1) - 1) / n) / 2^e_max, exactly (a power-of-two shift of an integer).

    With the default 32 bits this is floor(INT32_MAX / n) / 2^e_max.
    """
    return np.ldexp(np.float64(quantized_limit(n_workers, bits)), -np.asarray(exponent, dtype=np.int32))


def element_scales(exponents: np.ndarray, n_workers: int, k: int, length: int, bits: int = PROTOCOL_BITS) -> np.ndarray:
    """Per element: the scale of its block, for vectorised quantize/dequantize of a tensor."""
    return np.repeat(scale_for(exponents, n_workers, bits), k)[:length]


def quantize(
    x: np.ndarray,
    scale: np.ndarray | float,
    out: np.ndarray | None = None,
    work: np.ndarray | None = None,
) -> np.ndarray:
    """The int32 values a worker sends for ``x`` at ``scale``: x times the scale, computed in
    float64 and rounded to the nearest integer, ties to even (unbiased, like float32 rounding).

    ``x`` is one packet's elements or a block of packets, one per row (the worker quantizes a
    block at once, hosts/switchml/job.py); ``scale`` is one number or one per row (a column,
    shape (rows, 1)). ``out`` (an int32 array of x's shape, e.g. a big-endian view of packet
    buffers) and ``work`` (float64, x's shape) let the worker quantize into its send buffers
    without allocating per packet; given ``out``, the result is written there and ``out`` is
    returned. Callers guarantee |x| <= 2^e_max, so the result fits int32.
    """
    # BEGIN LAB 1: round half to even of x * scale in float64, as int32 (into out when given, using work)
    work = np.multiply(x, scale, out=work, dtype=np.float64)
    np.rint(work, out=work)
    if out is None:
        return work.astype(np.int32)
    np.copyto(out, work, casting="unsafe")
    return out
    # END LAB 1


FLUSH_ROWS = 4096
"""Blocks ``flushed_to_zero`` quantizes at once: its float64 work stays a few MiB for any tensor."""


def flushed_to_zero(x: np.ndarray, exponents: np.ndarray, n_workers: int, k: int, bits: int = PROTOCOL_BITS) -> int:
    """How many nonzero elements of one worker's float32 ``x`` quantize to 0 at their blocks'
    exponents (the maximum over the workers, ``exponents``): their contribution to the sum is
    lost. An element is flushed when |x| * f <= 1/2, i.e. when it is about 2^32 / n times
    smaller than 2^e_max (docs/pytorch.md); the same arithmetic as ``quantize``, block by block."""
    flushed = 0
    for start in range(0, len(exponents), FLUSH_ROWS):
        blocks = exponents[start:start + FLUSH_ROWS]
        part = x[start * k:(start + len(blocks)) * k]
        scales = element_scales(blocks, n_workers, k, len(part), bits)
        flushed += np.count_nonzero(quantize(part, scales) == 0) - np.count_nonzero(part == 0)
    return int(flushed)


def dequantize(int_sum: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """float32(float64(sum) / scale).

    A sum whose magnitude exceeds float32's range becomes +-inf, as a float32 sum would.
    """
    with np.errstate(over="ignore"):
        return (int_sum.astype(np.float64) / scale).astype(np.float32)


def error_bound(scale: np.ndarray, n_workers: int, values: np.ndarray) -> np.ndarray:
    """Per element: a proven bound on |values - (exact real sum of the n float inputs)|.

    Proof sketch. Each worker's q = rint(fl(x f)) has |q - x f| <= 1/2 + 2^-22 (rounding to an
    integer, plus the float64 product error 2^-53 * |x f| <= 2^-22 since |x f| <= 2^31).
    Summing n workers: |S - f * sum(x)| <= n (1/2 + 2^-22), i.e.
    |S / f - sum(x)| <= n (1/2 + 2^-22) / f in exact arithmetic. ``dequantize`` then rounds
    twice: S / f to float64 (2^-53 relative) and to float32 (2^-24 relative, or 2^-150
    absolute among subnormals); both together stay below 2^-23 |values| + 2^-149.
    """
    values64 = np.abs(values.astype(np.float64))
    return n_workers * (0.5 + PRODUCT_ERROR) / scale + 2.0**-23 * values64 + 2.0**-149


def _check_inputs(inputs: list[np.ndarray], n_workers: int) -> tuple[np.dtype, int]:
    if n_workers < 1 or len(inputs) != n_workers:
        raise ValueError(f"expected one tensor per worker ({n_workers}), got {len(inputs)}")
    dtypes = {np.asarray(x).dtype for x in inputs}
    lengths = {len(x) for x in inputs}
    if len(dtypes) != 1 or len(lengths) != 1:
        raise ValueError(f"workers' tensors differ: dtypes {dtypes}, lengths {lengths}")
    dtype = dtypes.pop()
    if dtype not in (np.dtype(np.float32), np.dtype(np.int32)):
        raise TypeError(f"in-network aggregation sums float32 or int32 tensors, not {dtype}")
    return dtype, lengths.pop()


def expected_sum(inputs: list[np.ndarray], k: int, n: int, bits: int = PROTOCOL_BITS) -> ExpectedSum:
    """The integer sum (and float result) a correct switch produces for these worker inputs.

    float32: block exponents per worker, e_max = max over workers, quantize with the shared
    scale (of ``bits``-bit sums, see "Fewer bits"), add in int64 (never beyond int32, see the
    module docstring), dequantize. int32: the wrapping 32-bit sum (``bits`` does not apply).
    """
    dtype, length = _check_inputs(inputs, n)
    if dtype == np.dtype(np.int32):
        total = np.sum(np.stack(inputs).astype(np.int64), axis=0)
        int_sum = total.astype(np.int32)  # keeps the low 32 bits: the switch's wrapping add
        return ExpectedSum(int_sum=int_sum, values=int_sum, exponents=None, scale=None)
    exponents = np.max(np.stack([block_exponents(x, k) for x in inputs]), axis=0) if length else np.zeros(0, np.int8)
    scale = element_scales(exponents, n, k, length, bits)
    total = np.sum(np.stack([quantize(x, scale) for x in inputs]).astype(np.int64), axis=0)
    if length and np.abs(total).max() > INT32_MAX:
        raise OverflowError("quantized sum exceeds int32: the scale invariant is broken")
    int_sum = total.astype(np.int32)
    return ExpectedSum(int_sum=int_sum, values=dequantize(int_sum, scale), exponents=exponents, scale=scale)
