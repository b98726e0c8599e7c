"""The embedded switch's delay line: link delay without netem, applied and measured."""

from __future__ import annotations

import contextlib
import os
import random
import re
import selectors
import socket
import statistics
import subprocess
import threading
import time
from pathlib import Path

import pytest

from base.timerfd import MonotonicTimer
from protocol.switchml import params
from switches import standalone
from switches.switchml import programming
from switches.embedded.delay_line import DelayLine
from tests.conftest import ON_THE_BENCH

pytestmark = [ON_THE_BENCH, pytest.mark.embedded]  # the embedded switch on a standalone test bed: beside the network tests (-n)

LINK_DELAY_MS = 20.0


def readable(selectable: DelayLine | MonotonicTimer) -> bool:
    with selectors.EpollSelector() as selector:
        selector.register(selectable, selectors.EVENT_READ)
        return bool(selector.select(0))


def test_frames_leave_in_order_once_due() -> None:
    sent: list[bytes] = []
    with contextlib.closing(DelayLine(hold_s=0.5)) as line:
        transmit = line.wrap(sent.append)
        frame = bytearray(b"first")
        transmit(memoryview(frame))
        frame[:] = b"reuse"  # the pipeline reuses its buffer: the queued frame must be a copy
        transmit(b"second")
        assert not readable(line)  # nothing due yet: the loop sleeps
        line.release(time.monotonic())
        assert sent == []
        line.release(time.monotonic() + 0.6)
        assert sent == [b"first", b"second"]


def test_refused_sends_are_counted() -> None:
    def refuse(frame: bytes) -> None:
        raise OSError("No buffer space available")

    with contextlib.closing(DelayLine(hold_s=0.001)) as line:
        line.wrap(refuse)(b"frame")
        line.release(time.monotonic() + 1)
        assert line.tx_errors == 1


def test_the_timer_fires_at_the_moment_it_is_armed_for() -> None:
    with MonotonicTimer() as timer:
        assert not readable(timer)
        timer.fire_at(time.monotonic() + 3600)
        assert not readable(timer)
        timer.fire_at(time.monotonic() - 1)  # re-armed, for a moment past: fires at once
        assert readable(timer)
        timer.acknowledge()
        assert not readable(timer)
        timer.acknowledge()  # nothing to consume: no error


HOLD_S = 0.005
FRAMES = 200


def test_held_frames_leave_within_a_fraction_of_a_millisecond_of_their_due_time() -> None:
    """The switch's loop (switch.py ``run``: an epoll wait over the ports and the line) with
    other datagrams waking it at random: an epoll timeout of whole milliseconds let the median
    frame go 0.5 ms late; the line's timer wakes the loop at the due time itself."""
    late: list[float] = []
    rng = random.Random(7)
    port, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    stop = threading.Event()

    def other_traffic() -> None:
        while not stop.wait(rng.expovariate(1000)):
            peer.send(b"update")

    sender = threading.Thread(target=other_traffic, daemon=True)
    with contextlib.closing(DelayLine(hold_s=HOLD_S)) as line, selectors.EpollSelector() as selector, port, peer:
        selector.register(line, selectors.EVENT_READ, line.release_due)
        selector.register(port, selectors.EVENT_READ, lambda: port.recv(2048))
        sent: list[float] = []
        transmit = line.wrap(lambda frame: sent.append(time.monotonic()))
        sender.start()
        try:
            for _ in range(FRAMES):
                time.sleep(random.uniform(0, 0.002))  # anywhere on the millisecond grid
                held_at = time.monotonic()
                transmit(b"frame")
                while not sent:
                    for key, _events in selector.select(1.0):
                        key.data()
                late.append(sent.pop() - (held_at + HOLD_S))
        finally:
            stop.set()
            sender.join()
    assert min(late) >= 0, "a frame left before its time"
    assert statistics.median(late) < 0.25e-3, f"held frames leave {statistics.median(late) * 1e3:.3f} ms late (median)"


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
