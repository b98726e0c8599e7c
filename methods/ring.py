"""Ring all-reduce over TCP (hosts/ring_allreduce.py), the NCCL/Gloo-style baseline.

Its bound counts payload bytes only: the TCP/IP headers it also carries can only lower it.
"""

from __future__ import annotations

from methods.method import Method, Verification, algbw_bound, require_workers
from protocol.packet import ELEMENT_BYTES


def traffic_per_tensor_byte(n_workers: int) -> float:
    """Bytes a host sends (and receives) per tensor byte in a ring all-reduce: 2(n-1)/n.

    The tensor is cut into n chunks. Reduce-scatter takes n-1 steps and all-gather another
    n-1; in each step every host sends one chunk (S/n bytes) to its successor and receives
    one from its predecessor. Total per host per direction: 2(n-1) * S/n.
    """
    require_workers(n_workers)
    return 2 * (n_workers - 1) / n_workers


def algbw_bound_bytes(link_bps: float, n_workers: int) -> float:
    """Ring all-reduce algbw bound in bytes/s: B/8 * n / (2(n-1))."""
    return algbw_bound(link_bps, traffic_per_tensor_byte(n_workers))


def ate_bound(link_bps: float, n_workers: int, element_bytes: int = ELEMENT_BYTES) -> float:
    """Ring all-reduce bound in aggregated elements/s: the algbw bound over the element size."""
    return algbw_bound_bytes(link_bps, n_workers) / element_bytes


def bound(link_bps: float, n_workers: int, k: int) -> float:
    """The ring's bound does not depend on a packet size: TCP segments carry the chunks."""
    return ate_bound(link_bps, n_workers)


RING = Method(
    name="ring", label="ring all-reduce", colour="tab:orange", verification=Verification.FLOAT_SUM, bound=bound,
    host="hosts.allreduce:RingMethod",
)
