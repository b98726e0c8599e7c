"""The embedded switch's delay line: link delay without netem, applied and measured."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from protocol.switchml import params
from switches import standalone
from switches.switchml import programming
from switches.embedded.delay_line import DelayLine
from tests.conftest import ON_THE_BENCH

pytestmark = [ON_THE_BENCH, pytest.mark.embedded]  # the embedded switch on a standalone test bed: beside the network tests (-n)

LINK_DELAY_MS = 20.0


def test_frames_leave_in_order_once_due() -> None:
    sent: list[bytes] = []
    line = DelayLine(hold_s=0.5)
    transmit = line.wrap(sent.append)
    frame = bytearray(b"first")
    transmit(memoryview(frame))
    frame[:] = b"reuse"  # the pipeline reuses its buffer: the queued frame must be a copy
    transmit(b"second")
    now = time.monotonic()
    assert 0.4 < line.due_in(now) <= 0.5
    line.release(now)
    assert sent == []
    line.release(now + 0.6)
    assert sent == [b"first", b"second"]
    assert line.due_in(now) is None


def test_refused_sends_are_counted() -> None:
    def refuse(frame: bytes) -> None:
        raise OSError("No buffer space available")

    line = DelayLine(hold_s=0.001)
    line.wrap(refuse)(b"frame")
    line.release(time.monotonic() + 1)
    assert line.tx_errors == 1


@pytest.mark.netns
def test_ping_through_the_switch_takes_four_link_delays(tmp_path: Path) -> None:
    """h0 -> switch -> h1 and back crosses four links: RTT >= 4 x 20 ms."""
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    from switches.embedded.launcher import embedded_switch

    with standalone.testbed(2) as bed, embedded_switch(bed.switch_ports, tmp_path, k=params.DEFAULT_K, max_pool_size=params.MAX_POOL_SIZE,
                                                 link_delay_ms=LINK_DELAY_MS) as control:
        programming.program_forwarding(control, list(bed.switch_ports), {h.mac: h.switch_port for h in bed.hosts})
        done = subprocess.run(["ip", "netns", "exec", bed.hosts[0].netns, "ping", "-c", "5", "-i", "0.2", "-W", "2",
                               bed.hosts[1].ipv4], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    rtts = [float(v) for v in re.findall(r"time=([\d.]+) ms", done.stdout)]
    # The first ping also waits for ARP (itself delayed), so judge the others.
    assert len(rtts) == 5 and all(rtt >= 4 * LINK_DELAY_MS for rtt in rtts), rtts
    assert max(rtts[1:]) < 4 * LINK_DELAY_MS + 40, f"RTTs {rtts} ms: the delay line lags"
