"""PyTorch's Gloo all-reduce (torch.distributed, backend "gloo") between the emulated hosts
(hosts/gloo_allreduce.py): a real, widely used implementation that nobody here wrote, so the
fairest baseline the testbed has. Needs the optional ``torch`` extra.

Its bound: ProcessGroupGloo's all_reduce of a dense CPU tensor calls ``gloo::allreduce``
without choosing an algorithm, and gloo/allreduce.cc runs ``ring`` for UNSPECIFIED (as for
RING; only BCUBE differs): the tensor cut into one chunk per rank, a ring reduce-scatter
then a ring all-gather, so every host sends and receives 2(n-1)/n bytes per tensor byte,
the ring's traffic (methods/ring.py). Its segments (at least two per rank, to overlap
transfer and reduction) change the pipelining, not the bytes. Gloo's shared-memory shortcut
(taken only when LOCAL_WORLD_SIZE says every rank is on one node) is kept off by the host
class, so the bound's traffic crosses the emulated links.
"""

from __future__ import annotations

from base.optional import torch_unavailable
from methods import ring
from methods import verification
from methods.method import Method, PayloadBound

BOUND = PayloadBound(ring.traffic_per_tensor_byte)
"""Gloo's default CPU all-reduce is a ring: the ring's payload bound, headers not counted."""

GLOO = Method(
    name="gloo", label="Gloo (PyTorch)", colour="tab:red", verify=verification.float_sum, bound=BOUND,
    host="hosts.gloo_allreduce:GlooMethod", unavailable=torch_unavailable, ddp_hook="hosts.torch_hook:gloo_hook",
    torch_backend="testbed_gloo",
)
