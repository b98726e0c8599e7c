"""What the testbed knows about an all-reduce method, in one frozen record per method.

The runner, the verifier, the results writer, the analysis and the config schema all read
these records (the registry in ``methods/__init__.py``) instead of naming methods
themselves, so a new method is its own file here, its host code, and one registry line.
This package sits beside topologies and workloads: it imports only ``protocol`` (frame
sizes) and never ``hosts`` (the host entry point is a "module:attribute" string that
``hosts.allreduce`` resolves). An in-network method refers to its protocol's record
(``aggregation``, methods/aggregation.py), which the runner and the networks ask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from methods.aggregation import Aggregation, JobParameters
from methods.verification import Expected, Verdict
from protocol.packet import ELEMENT_BYTES

BITS_PER_BYTE = 8


Verify = Callable[[Expected, np.ndarray, "np.ndarray | None"], Verdict]
"""(what the point's inputs must sum to, a worker's result, its integer sum or None) -> verdict."""
Bound = Callable[[float, int, int], float]
"""(link_bps, n_workers, k) -> the most aggregated elements per second links of that rate allow."""


class Network(Protocol):
    """What a method may prepare on a network before its first job there (the emulated and
    the simulated network both offer it)."""

    @property
    def aggregating_controls(self) -> Sequence[Any]:
        """The control plane of every switch that aggregates (switches/control.py's SwitchControl)."""


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
    aggregation: Aggregation | None = None
    """The in-network aggregation protocol its workers run (methods/aggregation.py); None for
    a method the hosts compute among themselves (the TCP baselines, Gloo). Its record gives
    the workers' job parameters, the switch's preparation, the pace model and the integer
    sums' width."""
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

    def job_parameters(self, protocol: Mapping[str, Any], data_path: str) -> JobParameters | None:
        """What its workers' spec carries as ``protocol`` (protocol/worker_spec.py), from the
        config's protocol section and the resolved data path; None for a method with no switch job."""
        return None if self.aggregation is None else self.aggregation.parameters(protocol, data_path)

    def prepare(self, network: Network, protocol: Mapping[str, Any]) -> None:
        """What the network needs before this method's first job on it: its protocol's state
        zeroed on every aggregating switch (the workers start from an empty pool); nothing for
        a method with no switch job."""
        if self.aggregation is None:
            return
        self.aggregation.reset(network.aggregating_controls, self.aggregation.parameters(protocol, protocol.get("data_path", "auto")))


def in_network(aggregation: Aggregation, *, name: str, label: str, colour: str, verify: Verify, bound: Bound) -> Method:
    """The method of an in-network aggregation protocol: its host class, DDP hook and backend
    are the protocol's (its record says them once)."""
    return Method(name=name, label=label, colour=colour, verify=verify, bound=bound, host=aggregation.host,
                  aggregation=aggregation, ddp_hook=aggregation.ddp_hook, torch_backend=aggregation.torch_backend)


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
