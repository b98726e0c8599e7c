"""A tensor into a SwitchML job and the job's sums back out: what every driver of the worker
core does before and after the packets, whatever carries them (the socket client,
client.py; the simulated clock's drivers, simulation/). Here, apart from the client, so
that a driver without sockets imports nothing of them.
"""

from __future__ import annotations

import numpy as np

from hosts.stats import JobStats
from hosts.switchml.job import AllReduceResult, UnsummableTensor
from protocol.quantize import UNSUMMABLE_EXPONENT, block_exponents, dequantize, element_scales

BATCH_PER_POOL = 2
"""Datagrams one batch may hold, per slot: a whole pool of results plus as many
duplicates (retransmissions answered twice); what does not fit waits for the next batch."""


def prepare_tensor(tensor: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The tensor as the library sends it (1-D, contiguous) and its block exponents (None for
    int32): what every driver of WorkerCore starts a job from (the socket client, the simulator's)."""
    x = np.ascontiguousarray(tensor)
    if x.ndim != 1:
        raise ValueError(f"allreduce takes a 1-D tensor, got shape {x.shape}")
    if x.dtype == np.float32:
        return lookahead_blocks(x, k)
    if x.dtype == np.int32:
        return x, None
    raise TypeError(f"allreduce aggregates float32 or int32 tensors, not {x.dtype}")


def lookahead_blocks(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 ``x`` as it is quantized, and its blocks' exponents for the lookahead round.

    A block the switch cannot sum (an inf, a NaN, |x| > 2^126) is sent as zeros with
    ``UNSUMMABLE_EXPONENT``, so every rank learns of it from the round's maximum and the job
    still completes on every rank (``job_result`` then raises ``UnsummableTensor``). The
    common tensor costs what ``block_exponents`` costs, and one look at its exponents."""
    try:
        exponents = block_exponents(x, k)
    except ValueError:  # an inf, a NaN or |x| >= 2^127 (check_quantizable)
        exponents = None
    if exponents is not None and not (exponents == UNSUMMABLE_EXPONENT).any():
        return x, exponents
    with np.errstate(invalid="ignore"):
        beyond = ~(np.abs(x) <= 2.0 ** (UNSUMMABLE_EXPONENT - 1))  # NaN is not <=
    unsummable = np.add.reduceat(beyond, np.arange(0, len(x), k)) > 0
    clean = x.copy()
    clean[np.repeat(unsummable, k)[: len(x)]] = 0
    exponents = block_exponents(clean, k)
    exponents[unsummable] = UNSUMMABLE_EXPONENT
    return clean, exponents


def job_result(int_sum: np.ndarray, e_max: np.ndarray, values: np.ndarray | None, quantized: bool, n_workers: int, k: int,
               length: int, stats: JobStats) -> AllReduceResult:
    """A finished job's result: the switch's int32 sums of the tensor's ``length`` elements,
    dequantized with the chunks' ``e_max`` when ``quantized`` (unless a loop dequantized as the
    results arrived: ``values``)."""
    int_sum = int_sum[:length]
    if not quantized:
        return AllReduceResult(values=int_sum, int_sum=int_sum, exponents=None, stats=stats)
    if (unsummable := np.flatnonzero(e_max == UNSUMMABLE_EXPONENT)).size:
        raise UnsummableTensor(unsummable, stats)
    if values is None:
        values = dequantize(int_sum, element_scales(e_max, n_workers, k, length))
    return AllReduceResult(values=values[:length], int_sum=int_sum, exponents=e_max, stats=stats)
