"""Verifying every worker's all-reduce result against what a correct run must produce.

SwitchML is checked bit for bit: the switch's int32 sum must equal the sum of the
quantized inputs (protocol.quantize.expected_sum), and the float result is derived from it
deterministically. The TCP baselines add float32 in an order of their own, so their float
results are checked against the float64 sum with the bound for n-term float32 summation;
their int32 results are exact (wrapping) like the switch's. A method's record names its
check (``Method.verify``): ``integer_sum`` for SwitchML, ``float_sum`` for the baselines; a
protocol that quantizes its own way (ATP's job-wide scale) is checked bit for bit with
``own_integer_sum`` against the exact sum its record computes (``Expected.own``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from protocol.quantize import ExpectedSum, expected_sum

FLOAT32_UNIT_ROUNDOFF = 2.0**-24


@dataclass(frozen=True)
class Verdict:
    verified: bool
    max_abs_error: float
    detail: str


@dataclass(frozen=True)
class Expected:
    """What a point's workers must end with, computed once from all ranks' inputs."""

    switchml: ExpectedSum
    exact64: np.ndarray
    """float64 sum (int64 for int32 inputs), the reference for the baselines."""
    abs_sum64: np.ndarray
    """Sum of |inputs| in float64: scales the float32 summation bound."""
    n_workers: int
    own: Mapping[str, ExpectedSum] = field(default_factory=dict)
    """Protocol name -> the exact sum of an in-network protocol that quantizes its own way
    (ATP's job-wide scale), where the runner asked for it (``expected_for``'s ``own``)."""


OwnSum = Callable[[list[np.ndarray]], ExpectedSum]
"""All ranks' inputs -> what a protocol with its own quantizer must sum them to exactly."""


def expected_for(inputs: list[np.ndarray], k: int, own: Mapping[str, OwnSum] | None = None) -> Expected:
    """What the point's workers must end with; ``own``: each protocol that quantizes its own
    way, by name, and how its exact sum is computed (methods.own_sums gives them)."""
    n = len(inputs)
    stacked64 = np.stack([x.astype(np.float64) for x in inputs])
    return Expected(
        switchml=expected_sum(inputs, k, n),
        exact64=stacked64.sum(axis=0),
        abs_sum64=np.abs(stacked64).sum(axis=0),
        n_workers=n,
        own={name: compute(inputs) for name, compute in (own or {}).items()},
    )


def _mismatch(got: np.ndarray, want: np.ndarray) -> str:
    bad = np.flatnonzero(got != want)
    i = int(bad[0])
    return f"{len(bad)} of {len(want)} elements differ; first at index {i}: got {got[i]}, expected {want[i]}"


def integer_sum(expected: Expected, values: np.ndarray, int_sum: np.ndarray | None) -> Verdict:
    """SwitchML's check: the switch's integer sum bit-exact against the sum of the inputs
    quantized as protocol/quantize.py does, and the float result that follows from it."""
    return exact_sum(expected.switchml, expected, values, int_sum)


def own_integer_sum(protocol: str) -> Callable[[Expected, np.ndarray, "np.ndarray | None"], Verdict]:
    """The check of a protocol that quantizes its own way: its integer sum bit-exact against
    ``expected.own[protocol]``, and the float result that follows from it."""
    def verify(expected: Expected, values: np.ndarray, int_sum: np.ndarray | None) -> Verdict:
        want = expected.own.get(protocol)
        if want is None:
            return Verdict(False, float("inf"), f"no expected {protocol} sum: the runner computes it with methods.own_sums "
                           f"({protocol} quantizes with its own scale)")
        return exact_sum(want, expected, values, int_sum)
    return verify


def exact_sum(want: ExpectedSum, expected: Expected, values: np.ndarray, int_sum: np.ndarray | None) -> Verdict:
    """``int_sum`` bit-exact against ``want``, ``values`` equal to its float result."""
    if int_sum is None:
        return Verdict(False, float("inf"), "no integer sum reported to verify")
    if int_sum.shape != want.int_sum.shape:
        return Verdict(False, float("inf"), f"int sum has shape {int_sum.shape}, expected {want.int_sum.shape}")
    if not np.array_equal(int_sum, want.int_sum):
        return Verdict(False, float("inf"), "integer sum: " + _mismatch(int_sum, want.int_sum))
    if not np.array_equal(values, want.values):
        return Verdict(False, float("inf"), "dequantized values: " + _mismatch(values, want.values))
    error = float(np.max(np.abs(values.astype(np.float64) - expected.exact64))) if len(values) else 0.0
    return Verdict(True, error, "integer sum bit-exact")


def float_sum(expected: Expected, values: np.ndarray, int_sum: np.ndarray | None = None) -> Verdict:
    """The baselines' check (a method adding in an order of its own). int32: exact wrapping
    sum. float32: within the n-term summation bound of the float64 sum."""
    want_shape = expected.exact64.shape
    if values.shape != want_shape:
        return Verdict(False, float("inf"), f"result has shape {values.shape}, expected {want_shape}")
    if values.dtype == np.int32:
        want = expected.switchml.int_sum  # the wrapping int32 sum
        if not np.array_equal(values, want):
            return Verdict(False, float("inf"), "int32 sum: " + _mismatch(values, want))
        return Verdict(True, 0.0, "int32 sum exact")
    error = np.abs(values.astype(np.float64) - expected.exact64)
    n = expected.n_workers
    gamma = (n * FLOAT32_UNIT_ROUNDOFF) / (1 - n * FLOAT32_UNIT_ROUNDOFF)
    bound = gamma * expected.abs_sum64 + 2.0**-149
    over = np.flatnonzero(error > bound)
    max_error = float(error.max()) if len(error) else 0.0
    if len(over):
        i = int(over[0])
        return Verdict(False, max_error, f"{len(over)} elements beyond the float32 summation bound; first at {i}: error {error[i]:.3g} > {bound[i]:.3g}")
    return Verdict(True, max_error, "within the float32 summation bound")
