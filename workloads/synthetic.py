"""Deterministic synthetic tensors: the same (seed, rank, stream, size, dtype) always gives the same values.

Why deterministic per rank: a verifier (or a test) can recompute every worker's input and
the expected sum without any data being shipped between hosts.

Distributions:
- float32: normal(0, scale). Model replays pass scale = 1/sqrt(fan_in) per layer, the
  magnitude of He-initialised weights, so layers differ in exponent as real gradients do
  (which is what SwitchML's per-block exponents react to).
- int32: uniform integers in [-INT32_SAFE, INT32_SAFE] with INT32_SAFE = (2**31 - 1) // 32,
  so the sum over up to 32 workers (a switch's most, protocol/params.py) never wraps: the expected sum is
  the plain integer sum, unambiguous whether a method wraps or saturates.
"""

from __future__ import annotations

import numpy as np

from protocol.params import MAX_WORKERS

INT32_SAFE = (2**31 - 1) // MAX_WORKERS
"""Largest |value| whose sum over MAX_WORKERS ranks still fits in int32."""

_DTYPE_CODES = {"float32": 0, "int32": 1}


def synthetic_tensor(size: int, dtype: str = "float32", seed: int = 0, rank: int = 0, stream: int = 0,
                     scale: float = 1.0) -> np.ndarray:
    """Rank ``rank``'s tensor number ``stream`` of ``size`` elements (see the module doc for distributions)."""
    if dtype not in _DTYPE_CODES:
        raise ValueError(f"dtype must be one of {sorted(_DTYPE_CODES)}, not {dtype!r}")
    if size < 0 or seed < 0 or rank < 0 or stream < 0:
        raise ValueError(f"size, seed, rank and stream must be non-negative (got {size}, {seed}, {rank}, {stream})")
    rng = np.random.default_rng(np.random.SeedSequence([seed, rank, stream, size, _DTYPE_CODES[dtype]]))
    if dtype == "int32":
        return rng.integers(-INT32_SAFE, INT32_SAFE, size=size, endpoint=True, dtype=np.int32)
    return (rng.standard_normal(size, dtype=np.float32) * np.float32(scale)).astype(np.float32, copy=False)
