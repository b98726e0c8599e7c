"""Did the network or the emulator set a SwitchML job's pace?

CPU shares catch a saturated process or machine, frame accounting a switch that drops
what it cannot handle, but an emulator can fall behind with neither: 8 workers on 10 Mbit/s
links left the machine 9 % idle, lost nothing, and reached 69 % of SwitchML's line-rate
bound. SwitchML is self-clocked (results are its acknowledgements), so when every process
and the switch keep up, a lossless job runs at the pace its links and pool allow
(its record's ``pace``, ``methods.switchml.switchml_job_pace``: line rate or window, plus the float32 lead round and
the last round trip); a job much slower than that was paced by the emulator.

Only jobs whose pace the model predicts well are checked: lossless (a lost update idles its
slot for a retransmission timeout by design), on shaped links, long enough that costs the
model leaves out are small. Those costs are per job, not per packet: releasing the job to
every worker process, quantizing the first pool of chunks, the result's last copy; a few
milliseconds on this machine. The baselines are not checked: their bounds
(``ring_ate_bound``, ``ps_ate_bound``) are ceilings on payload bytes, and TCP's headers,
slow start and per-step barriers legitimately keep them well below, by an amount no model
here predicts.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from experiments.config import Point
from methods.aggregation import Aggregation, Pace
from protocol.params import mbps_to_bps

PACE_SHARE = 0.9
"""A checked job must reach this share of its network's pace (model TAT / measured TAT).
Long lossless jobs reach 98-99 % at rates the machine keeps up with (the main job on the
eBPF switch at 2.5 Mbit/s), and 96 % when the window binds (pool 8 against a 21 ms round
trip: 4 workers, 10 ms link delay on the embedded switch's delay line); the remaining 10 %
covers the per-job costs the model leaves out. The 10 Mbit/s job above reached 70 %."""
BANDWIDTH_BOUND = 0.9
"""A job is checked when its data packets' intervals take at least this share of its model
TAT: the main job (64 rounds per slot) 98 %, a 16k-element job on a pool of 64 (9 rounds,
float32 lead round included) 89 %, a training step of 2,410 elements 82 %. Shorter jobs are
dominated by start and drain, where the per-job costs left out of the model weigh most."""
MIN_PACED_S = 0.2
"""Nor is a job checked whose model TAT is under this: the per-job costs the model leaves
out (a few ms) would be more than a few percent of it."""


@dataclass(frozen=True)
class PaceCheck:
    """One SwitchML job's measured TAT against the pace its network allows."""

    pace: Pace
    checked: bool

    @property
    def bound(self) -> str:
        return "window" if self.pace.window_bound else "line rate"


def pace_check(point: Point, protocol: Aggregation, link_mbps: float, loss: float) -> PaceCheck | None:
    """The network's pace, by ``protocol``'s pace model, for its jobs of ``point`` on links of
    ``link_mbps``, or None when it does not bound them: a protocol without a pace model; under
    loss, retransmission timeouts are part of the protocol; and a workload that computes
    between its all-reduces (a user's DDP script) has no pace of the network's alone."""
    if protocol.pace is None or loss > 0 or not point.workload_kind.paced:
        return None
    delay_ms = max(link.spec.delay_ms for link in point.topology.links)
    pace = protocol.pace(
        point.workload_info.elements, protocol.parameters(point.protocol, point.job.data_path),
        mbps_to_bps(point.topology.worker_share_mbps(link_mbps)), delay_ms / 1e3, point.workload["dtype"] == "float32",
    )
    return PaceCheck(pace, checked=pace.tat_s >= MIN_PACED_S and pace.streaming_fraction >= BANDWIDTH_BOUND)


def paced_by_emulator(jobs: pd.DataFrame, check: PaceCheck) -> pd.DataFrame:
    """The rows of ``jobs`` (one point's SwitchML jobs: point, method, repetition, tat_s)
    slower than ``PACE_SHARE`` of the network's pace, with that share as ``share_of_pace``."""
    share = check.pace.tat_s / jobs["tat_s"]
    slow = (share < PACE_SHARE) & check.checked
    return jobs.assign(share_of_pace=share.round(4), pace_tat_s=round(check.pace.tat_s, 4))[slow]
