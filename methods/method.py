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
from typing import Any, Callable, Mapping, Protocol

import numpy as np

from methods.verification import Expected, Verdict
from protocol.packet import ELEMENT_BYTES
from protocol.worker_spec import SwitchMLParameters

BITS_PER_BYTE = 8


Verify = Callable[[Expected, np.ndarray, "np.ndarray | None"], Verdict]
"""(what the point's inputs must sum to, a worker's result, its integer sum or None) -> verdict."""
Bound = Callable[[float, int, int], float]
"""(link_bps, n_workers, k) -> the most aggregated elements per second links of that rate allow."""


class Network(Protocol):
    """What a method may prepare on a point's network before its first job there
    (experiments/harness.py's PointNetwork)."""

    def reset_aggregation(self) -> None:
        """Every aggregating switch's registers to zero."""


class Pace(Protocol):
    """The fastest a job can go when only the network sets its pace (experiments/pace.py)."""

    tat_s: float
    ate_per_s: float
    streaming_fraction: float
    """Share of tat_s its data packets' own intervals take (the rest: start and drain)."""
    window_bound: bool


PaceModel = Callable[[int, int, int, float, float, bool], Pace]
"""(elements, k, pool_size, link_bps, link_delay_s, quantized) -> the network's pace for one job."""


def nothing_to_prepare(network: Network) -> None:
    """The ``prepare`` of a method that uses no switch state (the TCP baselines)."""


def no_spec_section(protocol: Mapping[str, Any], data_path: str) -> None:
    """The ``spec_section`` of a method that takes nothing from the config's protocol section."""


@dataclass(frozen=True)
class Method:
    name: str
    """As written in configs (``methods:``), runs.csv's ``method`` and summary.json."""
    label: str
    """In figure legends."""
    colour: str
    """Its matplotlib colour in every figure."""
    verify: Verify
    """How a worker's result is checked (methods/verification.py: ``integer_sum``, ``float_sum``)."""
    bound: Bound
    """Its link-rate bound in ATE/s (the module of each method derives it)."""
    host: str
    """"module:attribute" of the class a worker process builds one rank with, as
    ``cls(spec, rank)``: it has ``allreduce(tensor) -> (values, int_sum or None, stats)`` and
    ``close()`` (``hosts.allreduce.Method``)."""
    prepare: Callable[[Network], None] = nothing_to_prepare
    """What the network needs before its first job on it (SwitchML: zeroed registers)."""
    spec_section: Callable[[Mapping[str, Any], str], SwitchMLParameters | None] = no_spec_section
    """(config's protocol section, the resolved worker data path) -> what its workers' spec
    carries as ``protocol`` (protocol/worker_spec.py), or None for a method that needs none."""
    pace: PaceModel | None = None
    """Its pace model where nothing but its links and pool set its pace (self-clocked on the
    switch's slots, experiments/pace.py): summary.json then gives its share of the bound and
    of the pace, and ``kept_up`` checks its jobs. None where the bound is only a ceiling that
    the transport legitimately stays well below (TCP's headers, slow start, barriers)."""
    sum_bits: int | None = None
    """Width of the integer sums the network computes (training_steps.csv ``bits``), or None
    for methods that add floats."""
    ddp_hook: str | None = None
    """"module:attribute" of its PyTorch DDP communication hook, as
    ``factory(spec, rank, process_group, keep) -> (state, hook)``
    (hosts/torch_hook.py); None for a method a DDP training cannot use. The workloads that
    train through DDP (workloads/kinds/) run only methods that have one."""
    torch_backend: str | None = None
    """The torch.distributed backend a user's DDP script (workload kind ddp_script) gets
    where it asks for Gloo (hosts/torch_backend.py: ``switchml`` through the switch,
    ``testbed_gloo`` Gloo itself, recorded), so an unmodified script runs on the method;
    None for a method a DDP script cannot use."""
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
