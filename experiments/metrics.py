"""Per-job metrics, named as in docs/switchml-protocol.md.

TAT (tensor aggregation time) of a job is its slowest worker's; ATE/s = elements / TAT;
algbw = tensor bytes / TAT. Bounds and busbw are analytic models and live, derived, in
analysis/models.py, which both the runner's summary and the figures use.
"""

from __future__ import annotations


def ate_per_s(elements: int, tat_s: float) -> float:
    return elements / tat_s if tat_s > 0 else float("nan")


def algbw_bytes_per_s(tensor_bytes: int, tat_s: float) -> float:
    return tensor_bytes / tat_s if tat_s > 0 else float("nan")
