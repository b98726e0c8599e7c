"""Parameter server over TCP (hosts/parameter_server.py): every host a worker and the
server of 1/n of the tensor (co-located, sharded).

Its bound counts payload bytes only, like the ring's, which it equals.
"""

from __future__ import annotations

from methods import verification
from methods.method import Method, PayloadBound, require_workers


def traffic_per_tensor_byte(n_workers: int) -> float:
    """Bytes a host sends (and receives) per tensor byte with a co-located sharded PS: 2(n-1)/n.

    Each of the n hosts is a worker and also the parameter server for 1/n of the tensor.
    Push: a worker sends the n-1 shards it does not own, (n-1)/n of the tensor, and as a
    server receives n-1 contributions of its own shard, (n-1)/n * S. Pull: as a server it
    sends its aggregated shard to the n-1 others, (n-1)/n * S, and as a worker receives the
    n-1 shards it does not own, (n-1)/n * S. Each direction therefore carries (n-1)/n of the
    tensor twice: 2(n-1)/n, the same traffic as a ring (the PS moves it in 2 steps instead
    of 2(n-1), which matters for latency, not for this bandwidth bound).
    """
    require_workers(n_workers)
    return 2 * (n_workers - 1) / n_workers


BOUND = PayloadBound(traffic_per_tensor_byte)
"""Independent of the packet size: TCP segments carry the chunks."""

PS = Method(
    name="ps", label="parameter server", colour="tab:green", verify=verification.float_sum, bound=BOUND,
    host="hosts.allreduce:ParameterServerMethod",
)
