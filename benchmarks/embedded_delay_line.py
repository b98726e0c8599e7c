"""How late the embedded switch's delay line lets a frame go: the wait its loop makes for a
held frame (switches/embedded/switch.py, ``run``: an epoll wait of Python's ``selectors``
until the head frame of the ``DelayLine`` is due, handling the port's datagrams that wake it
meanwhile, then the release), timed against the frame's due time.

Python's epoll wait takes its timeout in whole milliseconds, rounded up, so a frame due
within a millisecond of the switch's last wake-up waits for the next whole millisecond; the
scheduler's wake-up comes on top. One frame at a time is held (``--hold-ms``, a link pair's
delay: pool_size_sensitivity's 2 x 10 ms) while other datagrams reach the port at random
(``--gap-ms`` apart on average, exponential gaps; 0: none), each frame after a random pause
so that frames fall anywhere on the millisecond grid. The switch's own classes are its
target's to import (tests/test_layers.py), so the wait is written out here: a deque pop
more or less does not move it. Needs no root.

    .venv/bin/python benchmarks/embedded_delay_line.py [--frames 500] [--hold-ms 20] [--gap-ms 1]

prints the lateness's mean, percentiles and maximum in ms (benchmarks/README.md,
"Simulated against emulated").
"""

from __future__ import annotations

import argparse
import random
import selectors
import socket
import statistics
import sys
import threading
import time


def traffic(peer: socket.socket, gap_s: float, stop: threading.Event, seed: int) -> None:
    """Datagrams into the switch's port at random moments, ``gap_s`` apart on average (exponential
    gaps), until ``stop``: the other frames that wake the switch while one is held."""
    rng = random.Random(seed)
    while not stop.wait(rng.expovariate(1 / gap_s)):
        peer.send(b"update")


def lateness(frames: int, hold_s: float, gap_s: float, seed: int = 1) -> list[float]:
    """Each of ``frames`` held frames' release after its due time, in seconds, while other
    datagrams arrive ``gap_s`` apart on average (0: none)."""
    rng = random.Random(seed)
    late = []
    port, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    stop = threading.Event()
    sender = threading.Thread(target=traffic, args=(peer, gap_s, stop, seed + 1), daemon=True)
    with selectors.EpollSelector() as selector, port, peer:
        selector.register(port, selectors.EVENT_READ, lambda: port.recv(2048))
        if gap_s:
            sender.start()
        for _ in range(frames):
            time.sleep(rng.uniform(0.0, 0.002))
            due = time.monotonic() + hold_s
            while (now := time.monotonic()) < due:  # the switch's loop: wait until the head is due, or a port wakes it
                for key, _events in selector.select(due - now):
                    key.data()
            late.append(time.monotonic() - due)
        stop.set()
    return late


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=500)
    parser.add_argument("--hold-ms", type=float, default=20.0)
    parser.add_argument("--gap-ms", type=float, default=1.0, help="mean time between the other datagrams that reach the switch (0: none)")
    args = parser.parse_args(argv)
    if args.frames < 1 or args.hold_ms <= 0 or args.gap_ms < 0:
        parser.error("--frames must be >= 1, --hold-ms > 0 and --gap-ms >= 0")
    late = sorted(x * 1e3 for x in lateness(args.frames, args.hold_ms / 1e3, args.gap_ms / 1e3))
    p10, p50, p90 = (late[int(q * (len(late) - 1))] for q in (0.1, 0.5, 0.9))
    print(f"{args.frames} frames held {args.hold_ms:g} ms, other datagrams {args.gap_ms:g} ms apart: released late by {statistics.mean(late):.3f} ms on average "
          f"(p10 {p10:.3f}, median {p50:.3f}, p90 {p90:.3f}, max {late[-1]:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
