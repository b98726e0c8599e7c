"""The paper's metrics, named as in docs/switchml-protocol.md, computed in one place.

TAT (tensor aggregation time) of a job is its slowest worker's; ATE/s = elements / TAT;
algbw = tensor bytes / TAT; busbw = algbw * 2(n-1)/n (nccl-tests). The line-rate bound is
what SwitchML could reach if the bottleneck link carried nothing but full update frames.
"""

from __future__ import annotations

from protocol.packet import ELEMENT_BYTES, frame_bytes


def ate_per_s(elements: int, tat_s: float) -> float:
    return elements / tat_s if tat_s > 0 else float("nan")


def algbw_bytes_per_s(tensor_bytes: int, tat_s: float) -> float:
    return tensor_bytes / tat_s if tat_s > 0 else float("nan")


def busbw_bytes_per_s(algbw: float, n_workers: int) -> float:
    return algbw * 2 * (n_workers - 1) / n_workers


def line_rate_bound_ate_per_s(link_mbps: float, k: int) -> float:
    """ATE/s <= B * (4k / frame_bytes) / 32: payload share of each frame, 32 bits per element.

    Frame bytes are Ethernet + IPv4 + UDP + SwitchML header + 4k, without preamble and
    inter-frame gap: htb shapes the frame bytes the kernel sees, so that is the wire here.
    """
    bits_per_s = link_mbps * 1e6
    return bits_per_s * (ELEMENT_BYTES * k / frame_bytes(k)) / (8 * ELEMENT_BYTES)
