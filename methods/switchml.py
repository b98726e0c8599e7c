"""SwitchML: every worker sends each k-element chunk once to the switch, which sums the
chunks of all workers in its registers and multicasts the result (hosts/switchml/).

Its bound is the line rate of its frames: htb shapes Ethernet frame bytes, so preamble and
inter-frame gap are not counted (analysis/models.py, "Framing convention").
"""

from __future__ import annotations

from methods.method import BITS_PER_BYTE, Method, Verification, require_positive
from protocol.packet import ELEMENT_BYTES, frame_bytes
from protocol.quantize import PROTOCOL_BITS


def line_rate_ate(link_bps: float, k: int) -> float:
    """Most aggregated tensor elements per second SwitchML can reach on links of ``link_bps``.

    Derivation: each worker sends every chunk of k elements exactly once, in one frame of
    ``frame_bytes(k)`` bytes, and receives each result once, in a frame of the same size on
    the other direction of its full-duplex link. So a link carries at most
    ``B / (8 * frame_bytes(k))`` packets/s each way, i.e. ``k * B / (8 * frame_bytes(k))``
    elements/s. Written as the protocol document does, with 32 bits per int32 element::

        ATE/s <= B * (4k / frame_bytes(k)) / 32

    ``4k / frame_bytes(k)`` is the goodput fraction of a frame. Preamble and IFG are not
    counted (htb shapes frame bytes).
    """
    require_positive(link_bps=link_bps, k=k)
    # BEGIN LAB 0: elements/s on links of link_bps when each k-element update and each result crosses once in frame_bytes(k)
    return link_bps * (ELEMENT_BYTES * k / frame_bytes(k)) / (BITS_PER_BYTE * ELEMENT_BYTES)
    # END LAB 0


def bound(link_bps: float, n_workers: int, k: int) -> float:
    """The line rate, whatever the number of workers: each sends and receives the tensor once."""
    return line_rate_ate(link_bps, k)


SWITCHML = Method(
    name="switchml", label="SwitchML", colour="tab:blue", verification=Verification.INTEGER_SUM, bound=bound,
    host="hosts.allreduce:SwitchMLMethod", paced_by_network=True, sum_bits=PROTOCOL_BITS, ddp_hook="hosts.torch_hook:switchml_hook",
)
