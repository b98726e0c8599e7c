"""The all-reduce methods the testbed compares, as plug-ins (nccl-tests' one file per
collective, Pantheon's one registry of schemes).

Each method is one module here defining one ``Method`` record (methods/method.py): its
name, figure label and colour, how its results are verified, its link-rate bound and the
host class a worker runs. ``REGISTRY`` below lists them, in the order figures draw them;
the config schema's method names, the worker's dispatch, the verifier, the results
summary, the analysis' tables and figures all read it.

Adding a method (say an all-gather based one, ``allgather``): its host code in
``hosts/`` (a class ``cls(spec, rank)`` with ``allreduce`` and ``close``: a TCP collective
needs only a ``TcpCollective`` subclass and a two-line ``BaselineMethod`` subclass naming it
in ``hosts/allreduce.py``), ``methods/allgather.py`` with its bound and its ``Method``
record, and one line in ``REGISTRY`` (plus its module in the import). Configs may then name
it, the runner verifies it, and the figures draw it in its colour.
"""

from __future__ import annotations

from base.plugin import named
from typing import Any, Mapping

from methods import atp, gloo, ps, ring, switchml
from methods.aggregation import Aggregation
from methods.method import Method
from methods.verification import OwnSum

AGGREGATIONS: tuple[Aggregation, ...] = (
    switchml.AGGREGATION,
    atp.AGGREGATION,
)
"""Every in-network aggregation protocol (methods/aggregation.py), one line each: the switch
targets declare which of these they run (``SwitchTarget.protocols``)."""

REGISTRY: tuple[Method, ...] = (
    switchml.SWITCHML,
    atp.ATP,
    ring.RING,
    ps.PS,
    gloo.GLOO,
)
"""Every method, one line each, in figure order."""
NAMES: tuple[str, ...] = tuple(method.name for method in REGISTRY)
SWITCHML = switchml.SWITCHML
"""The method under study: figures compare the others (the baselines) with it."""
GLOO = gloo.GLOO
"""PyTorch's own all-reduce: the baseline of a DDP training (workload kind torch)."""
BASELINES: tuple[Method, ...] = tuple(method for method in REGISTRY if method is not SWITCHML)
"""Every method the figures compare with SwitchML (ATP, the other in-network design, among them)."""


def by_name(name: str) -> Method:
    """The registered method called ``name``."""
    return named(REGISTRY, name, "method")


def aggregation(name: str) -> Aggregation:
    """The registered in-network aggregation protocol called ``name``."""
    return named(AGGREGATIONS, name, "in-network aggregation protocol")


def k_choices() -> list[int]:
    """Every k some registered protocol's packets carry, in order: the config schema's
    ``protocol.k`` enum, and the k a calibration measures."""
    return sorted({k for protocol in AGGREGATIONS for k in protocol.k_choices})


def aggregations_of(names: list[str] | tuple[str, ...]) -> list[Aggregation]:
    """The protocols the methods called ``names`` run on the switch, each once, in their order."""
    found: list[Aggregation] = []
    for name in names:
        protocol = by_name(name).aggregation
        if protocol is not None and protocol not in found:
            found.append(protocol)
    return found


def own_sums(names: list[str] | tuple[str, ...], protocol: Mapping[str, Any]) -> dict[str, OwnSum]:
    """For ``methods/verification.expected_for``'s ``own``: each protocol among the methods
    ``names`` that quantizes its own way (ATP), with its exact sum at the config's ``protocol``
    section; empty when none does (SwitchML and the baselines need nothing more)."""
    sums: dict[str, OwnSum] = {}
    for protocol_record in aggregations_of(names):
        compute = protocol_record.expected_sum
        if compute is not None:
            parameters = protocol_record.parameters(protocol, protocol.get("data_path", "auto"))
            sums[protocol_record.name] = lambda inputs, compute=compute, parameters=parameters: compute(inputs, parameters)
    return sums


__all__ = ["AGGREGATIONS", "BASELINES", "NAMES", "REGISTRY", "SWITCHML", "Aggregation", "Method", "aggregation", "aggregations_of",
           "by_name", "k_choices", "own_sums"]
