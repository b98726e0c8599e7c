"""Ring all-reduce over TCP (hosts/ring_allreduce.py), the NCCL/Gloo-style baseline.

Its bound counts payload bytes only: the TCP/IP headers it also carries can only lower it.
"""

from __future__ import annotations

from methods import verification
from methods.method import Method, PayloadBound, require_workers


def traffic_per_tensor_byte(n_workers: int) -> float:
    """Bytes a host sends (and receives) per tensor byte in a ring all-reduce: 2(n-1)/n.

    The tensor is cut into n chunks. Reduce-scatter takes n-1 steps and all-gather another
    n-1; in each step every host sends one chunk (S/n bytes) to its successor and receives
    one from its predecessor. Total per host per direction: 2(n-1) * S/n.
    """
    require_workers(n_workers)
    return 2 * (n_workers - 1) / n_workers


def busbw(algbw_bytes_per_s: float, n_workers: int) -> float:
    """nccl-tests bus bandwidth: algbw * 2(n-1)/n.

    Scaling by the ring's traffic factor makes busbw comparable with the link rate for any
    n: a ring running at its bound has busbw = B/8.
    """
    return algbw_bytes_per_s * traffic_per_tensor_byte(n_workers)


BOUND = PayloadBound(traffic_per_tensor_byte)
"""Independent of the packet size: TCP segments carry the chunks."""

RING = Method(
    name="ring", label="ring all-reduce", colour="tab:orange", verify=verification.float_sum, bound=BOUND,
    host="hosts.allreduce:RingMethod",
)
