"""What the testbed knows about an all-reduce method, in one frozen record per method.

The runner, the verifier, the results writer, the analysis and the config schema all read
these records (the registry in ``methods/__init__.py``) instead of naming methods
themselves, so a new method is its own file here, its host code, and one registry line.
This package sits beside topologies and workloads: it imports only ``protocol`` (frame
sizes) and never ``hosts`` (the host entry point is a "module:attribute" string that
``hosts.allreduce`` resolves).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable

from protocol.packet import ELEMENT_BYTES

BITS_PER_BYTE = 8


class Verification(Enum):
    """How experiments/verify.py checks a worker's result."""

    INTEGER_SUM = "integer sum"
    """The worker reports the raw int32 sum too; it must equal the sum of the quantized
    inputs bit for bit, and the float result the value that follows from it (SwitchML)."""
    FLOAT_SUM = "float32 summation bound"
    """Float results within the bound of n-term float32 summation of the float64 sum, int32
    results the exact wrapping sum (methods that add in an order of their own)."""


Bound = Callable[[float, int, int], float]
"""(link_bps, n_workers, k) -> the most aggregated elements per second links of that rate allow."""


@dataclass(frozen=True)
class Method:
    name: str
    """As written in configs (``methods:``), runs.csv's ``method`` and summary.json."""
    label: str
    """In figure legends."""
    colour: str
    """Its matplotlib colour in every figure."""
    verification: Verification
    bound: Bound
    """Its link-rate bound in ATE/s (the module of each method derives it)."""
    host: str
    """"module:attribute" of the class a worker process builds one rank with, as
    ``cls(spec, rank)``: it has ``allreduce(tensor) -> (values, int_sum or None, stats)`` and
    ``close()`` (``hosts.allreduce.Method``)."""
    paced_by_network: bool = False
    """True when nothing but its links and pool set its pace (self-clocked on the switch's
    slots, experiments/pace.py): summary.json then gives its share of the bound and of the
    pace, and ``kept_up`` checks its jobs. False where the bound is only a ceiling that the
    transport legitimately stays well below (TCP's headers, slow start, barriers)."""
    sum_bits: int | None = None
    """Width of the integer sums the network computes (training_steps.csv ``bits``), or None
    for methods that add floats."""
    ddp_hook: str | None = None
    """"module:attribute" of its PyTorch DDP communication hook, as
    ``factory(spec, rank, process_group, keep_last_pass) -> (state, hook)``
    (hosts/torch_hook.py); None for a method a DDP training cannot use. The workloads that
    train through DDP (workloads/kinds/) run only methods that have one."""
    unavailable: Callable[[], str | None] = lambda: None
    """Why this method cannot run on this machine (an optional dependency absent: one
    sentence naming how to install it), or None when it can. experiments/config.py asks it
    for every method a config names, so a run fails as its config loads, not on the hosts."""


def algbw_bound(link_bps: float, traffic_per_tensor_byte: float) -> float:
    """Upper bound on algbw (tensor bytes / s) when a host moves that many bytes per tensor byte.

    A host link carries B/8 bytes/s each way; if all-reducing S bytes costs
    ``traffic_per_tensor_byte * S`` bytes on it, then t >= traffic * S / (B/8), so
    algbw = S / t <= B / (8 * traffic).
    """
    require_positive(link_bps=link_bps, traffic_per_tensor_byte=traffic_per_tensor_byte)
    return link_bps / BITS_PER_BYTE / traffic_per_tensor_byte


@dataclass(frozen=True)
class PayloadBound:
    """The bound of a method whose every host moves ``traffic_per_tensor_byte(n)`` payload
    bytes per tensor byte over its link (the TCP baselines): a ceiling, since the headers
    they also carry can only lower it. Called as a ``Bound``; k plays no part."""

    traffic_per_tensor_byte: Callable[[int], float]

    def algbw(self, link_bps: float, n_workers: int) -> float:
        """Tensor bytes per second: B/8 over the traffic per tensor byte."""
        return algbw_bound(link_bps, self.traffic_per_tensor_byte(n_workers))

    def ate(self, link_bps: float, n_workers: int, element_bytes: int = ELEMENT_BYTES) -> float:
        """Aggregated elements per second: the algbw bound over the element size."""
        return self.algbw(link_bps, n_workers) / element_bytes

    def __call__(self, link_bps: float, n_workers: int, k: int) -> float:
        return self.ate(link_bps, n_workers)


def require_workers(n_workers: int) -> None:
    if n_workers < 2:
        raise ValueError(f"an all-reduce needs at least 2 workers, got {n_workers}")


def require_positive(**values: float) -> None:
    for name, value in values.items():
        if not value > 0:
            raise ValueError(f"{name} must be positive, got {value}")
