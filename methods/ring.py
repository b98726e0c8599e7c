"""Ring all-reduce over TCP (hosts/ring_allreduce.py), the NCCL/Gloo-style baseline.

Its bound counts payload bytes only: the TCP/IP headers it also carries can only lower it.
"""

from __future__ import annotations

from methods.method import Method, PayloadBound, Verification, require_workers


def traffic_per_tensor_byte(n_workers: int) -> float:
    """Bytes a host sends (and receives) per tensor byte in a ring all-reduce: 2(n-1)/n.

    The tensor is cut into n chunks. Reduce-scatter takes n-1 steps and all-gather another
    n-1; in each step every host sends one chunk (S/n bytes) to its successor and receives
    one from its predecessor. Total per host per direction: 2(n-1) * S/n.
    """
    require_workers(n_workers)
    return 2 * (n_workers - 1) / n_workers


BOUND = PayloadBound(traffic_per_tensor_byte)
"""Independent of the packet size: TCP segments carry the chunks."""

RING = Method(
    name="ring", label="ring all-reduce", colour="tab:orange", verification=Verification.FLOAT_SUM, bound=BOUND,
    host="hosts.allreduce:RingMethod",
)
