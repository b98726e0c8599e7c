"""Every frame a switch handles is accounted for: kernel port counters against pipeline counters.

bmv2 under overload loses frames before its ingress pipeline, where no P4 counter sees
them; the testbed compares what the switch's ports received with what the pipeline counted
(network/port_counters.py) and turns ``kept_up`` false when they differ.
"""

from __future__ import annotations

import time

import pandas as pd
import pytest

from experiments.results import switch_frame_losses
from network.port_counters import PortCounters, account_switch, frames_lost, read_ports
from protocol.switchml import params
from tests.conftest import JOB, ON_THE_BENCH, SwitchUnderTest
from tests.switch_io import update_frame
from tests.test_switch_behaviour import values

pytestmark = ON_THE_BENCH  # a standalone test bed: the embedded and bmv2 cases run beside the network tests (-n)

BURST = 2_000
"""Frames sent back to back by one Python raw socket (~300k/s): far beyond bmv2's ~10k/s."""


def counters_at_rest(switch: SwitchUnderTest, settle_s: float = 0.3, timeout_s: float = 20.0) -> dict[str, int]:
    """The pipeline counters once they stop moving (the switch has drained its queues)."""
    deadline = time.monotonic() + timeout_s
    last = switch.counters()
    while time.monotonic() < deadline:
        time.sleep(settle_s)
        now = switch.counters()
        if now == last:
            return now
        last = now
    return last


def burst(switch: SwitchUnderTest, frames: int, interval_s: float = 0.0) -> dict[str, int]:
    """Unknown-sender updates from host 2 (each is counted once, EV_DROP_UNKNOWN_SENDER), one
    every ``interval_s`` or back to back, and the switch's frame accounting for them."""
    interfaces = list(switch.testbed.switch_ports.values())
    frame = update_frame(switch.testbed.hosts[2], 0, 0, values(1, switch.k), JOB)
    before = read_ports(interfaces)
    for _ in range(frames):
        try:
            switch.ports.send(2, frame)
        except BlockingIOError:
            continue  # the host's own socket buffer is full: not sent, so not counted by rx
        if interval_s:
            time.sleep(interval_s)
    counters = counters_at_rest(switch)
    return account_switch(before, read_ports(interfaces), interfaces, counters, params.INGRESS_NOTES)


def test_accounting_balances_when_the_switch_keeps_up(switch: SwitchUnderTest) -> None:
    """Paced at ~1,000 frames/s (bmv2 loses even a back-to-back burst of 200: its input
    queue is short), every frame the ports received is in the pipeline's counters."""
    frames = burst(switch, 200, interval_s=0.001)
    assert frames["port_rx_frames"] >= 200
    assert frames["pipeline_in_frames"] == frames["port_rx_frames"], frames
    assert frames["input_lost"] == frames["output_lost"] == 0
    assert not frames_lost(frames["input_lost"], frames["port_rx_frames"])


def test_bmv2_overload_losses_are_seen(switch: SwitchUnderTest, request: pytest.FixtureRequest) -> None:
    """The loss no bmv2 counter shows appears as input_lost (and so kept_up: false)."""
    if request.node.callspec.params["target"][0] != "bmv2":  # (target, k)
        pytest.skip("only bmv2 loses input under this burst (the embedded switch's socket holds it)")
    frames = burst(switch, BURST)
    assert frames_lost(frames["input_lost"], frames["port_rx_frames"]), frames
    assert not switch_frame_losses(pd.DataFrame([{**frames, "switch": "s1"}])).empty


def test_accounting_arithmetic() -> None:
    before = {"a": PortCounters(10, 5, 0, 0), "b": PortCounters(0, 0, 1, 2)}
    after = {"a": PortCounters(110, 45, 0, 1), "b": PortCounters(50, 30, 3, 2)}
    counters = dict.fromkeys(params.EVENT_COUNTER_CELLS + params.EGRESS_EVENTS, 0)
    # EV_L2_NOT_LEARNED is counted besides a frame's EV_FORWARDED: not a frame of its own.
    counters.update(EV_RESULT_MULTICAST=100, EV_UPDATE_CONSUMED=40, EGV_SENT=80, EV_L2_NOT_LEARNED=5)
    assert account_switch(before, after, ["a", "b"], counters, params.INGRESS_NOTES) == {
        "port_rx_frames": 150, "pipeline_in_frames": 140, "input_lost": 10,
        "pipeline_out_frames": 80, "port_tx_frames": 70, "queue_drops": 2, "output_lost": 7,
    }
    assert frames_lost(10, 150) and not frames_lost(2, 150) and not frames_lost(9, 10_000)

