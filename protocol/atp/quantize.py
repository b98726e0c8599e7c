"""ATP's numbers: one fixed scale per job, SwitchML's overflow-proof arithmetic, exact sums.

The choice. The authors' workers multiply by 10^6 and the switch adds with saturation; a
packet with a value beyond ~213 goes as float32 (overflow = 1) and the PS sums it in floats.
Neither part gives a sum the testbed can verify bit for bit: 10^6 x 213 x n saturates int32
for n >= 11, and a float sum at the PS depends on the order packets arrive in. SwitchML's
block floating point is exact, but it needs the switch to keep the maximum exponent per slot
and a lookahead round of exponent-only packets: a register and a round trip that ATP's
switch does not have, so reusing it would change ATP's data plane, not just its hosts.

So ATP here keeps the authors' design, a scale every worker of the job knows in advance,
and takes the scale from protocol/quantize.py's proof: f = floor(INT32_MAX / n) / 2^e, where
2^e bounds |x| over the job (``exponent``, a job parameter). Every quantized value is then
within floor(INT32_MAX / n), n of them never leave int32, no add can saturate or wrap, and
the float path is never needed: a tensor with a value beyond 2^e is refused before anything
is sent, naming the element. The price against SwitchML's per-packet exponents is precision
where a block's values are far below 2^e (the same absolute step everywhere); the verifier,
the error bound and the rounding are protocol/quantize.py's functions, unchanged.

int32 tensors travel unscaled and the switch adds with wrapping int32 arithmetic (not the
authors' saturation): the sum is the exact one modulo 2^32, as SwitchML's verifier expects.
"""

from __future__ import annotations

import numpy as np

from protocol.packet import EXPONENT_MAX, EXPONENT_MIN
from protocol.quantize import ExpectedSum, check_quantizable, dequantize, quantize, scale_for


def check_exponent(exponent: int) -> None:
    """Raise ValueError unless ``exponent`` is an int8 like SwitchML's block exponents."""
    if not EXPONENT_MIN <= exponent <= EXPONENT_MAX:
        raise ValueError(f"ATP's value exponent must be {EXPONENT_MIN}..{EXPONENT_MAX}, got {exponent}")


def check_within(x: np.ndarray, exponent: int) -> None:
    """Raise ValueError naming the first element that is not finite or exceeds 2^exponent."""
    check_exponent(exponent)
    check_quantizable(x)
    bound = 2.0**exponent
    if len(x) and np.maximum(np.max(x), -np.min(x)) > bound:
        index = int(np.argmax(np.abs(x) > bound))
        raise ValueError(f"cannot quantize element {index} = {float(x[index])!r}: |x| > 2^{exponent}, the job's value bound")


def job_scale(exponent: int, n_workers: int) -> float:
    """floor(INT32_MAX / n) / 2^exponent: the one scale of every value of the job."""
    check_exponent(exponent)
    return float(scale_for(exponent, n_workers))


def quantize_tensor(x: np.ndarray, exponent: int, n_workers: int) -> np.ndarray:
    """The int32 values a worker sends for ``x``: float32 scaled and rounded, int32 as it is."""
    if x.dtype == np.int32:
        return x
    if x.dtype != np.float32:
        raise TypeError(f"ATP aggregates float32 or int32 tensors, not {x.dtype}")
    check_within(x, exponent)
    return quantize(x, job_scale(exponent, n_workers))


def flushed_to_zero(x: np.ndarray, exponent: int, n_workers: int) -> int:
    """How many nonzero elements of one worker's ``x`` the job's scale rounds to 0, so that
    its part of the sum is lost (at most 2^exponent / floor(INT32_MAX / n) / 2 in
    magnitude); none for int32, which travels unscaled. ``x`` is within the job's bound."""
    if x.dtype == np.int32:
        return 0
    return int(np.count_nonzero(quantize_tensor(x, exponent, n_workers) == 0) - np.count_nonzero(x == 0))


def dequantize_sum(int_sum: np.ndarray, exponent: int, n_workers: int) -> np.ndarray:
    """The float32 all-reduce result of a float job's int32 sum."""
    return dequantize(int_sum, np.float64(job_scale(exponent, n_workers)))


def expected_sum(inputs: list[np.ndarray], n_workers: int, exponent: int) -> ExpectedSum:
    """What a correct ATP job produces (the int32 sum bit for bit, and the float result)."""
    if len(inputs) != n_workers or len({x.dtype for x in inputs}) != 1 or len({len(x) for x in inputs}) != 1:
        raise ValueError(f"expected {n_workers} tensors of one dtype and length")
    total = np.sum(np.stack([quantize_tensor(x, exponent, n_workers) for x in inputs]).astype(np.int64), axis=0)
    int_sum = total.astype(np.int32)  # float jobs never wrap (module docstring); int32 jobs wrap like the switch
    if inputs[0].dtype == np.int32:
        return ExpectedSum(int_sum=int_sum, values=int_sum, exponents=None, scale=None)
    scale = np.full(len(int_sum), job_scale(exponent, n_workers))
    return ExpectedSum(int_sum=int_sum, values=dequantize(int_sum, scale), exponents=None, scale=scale)
