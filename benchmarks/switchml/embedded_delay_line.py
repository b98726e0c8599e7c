"""How late the switch's delay line lets a frame go: the real switch, started as the tests and
benchmarks start it (switches/standalone.py) with links of ``--link-delay-ms``, each frame's
one-way time from one host to another timed against the two links' delay it must take.

One UDP datagram at a time crosses the switch, h0 -> h1, carrying its send time; h1's kernel
stamps its arrival (SO_TIMESTAMPNS; both namespaces read the same clock). Each is sent after a
random pause, so that frames fall anywhere on the millisecond grid (an epoll timeout is whole
milliseconds), while h2 sends other datagrams through the switch at random (``--gap-ms``
apart on average, exponential gaps; 0: none) that wake the switch meanwhile. The same run with
no link delay gives the one-way time of the rest of the path (veths, the switch's program),
the reference the lateness is read against. The target is the first that delays frames
itself (switches/targets.py), running SwitchML's program, whose forwarding carries the
datagrams. Run as root:

    .venv/bin/python benchmarks/switchml/embedded_delay_line.py [--frames 300] [--link-delay-ms 10] [--gap-ms 1]

prints, for the delayed and the undelayed run, the one-way time beyond the links' delay:
mean, median, p99 and maximum in ms (benchmarks/README.md, "Simulated against emulated").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import statistics
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from base.netns import Host  # noqa: E402
from protocol.switchml import params  # noqa: E402
from switches import standalone  # noqa: E402
from switches.switchml import programming  # noqa: E402
from switches.targets import delay_line_targets  # noqa: E402

PORT, OTHER_PORT = 9000, 9001
WARMUP_FRAMES = 5
"""The first frames also wait for ARP (itself delayed): not counted."""
SO_TIMESTAMPNS = 35
"""<asm-generic/socket.h>: the kernel's arrival time stamp in ns; Python's socket module does not name it."""
SO_NO_CHECK = 11
"""<asm-generic/socket.h>: send UDP without a checksum. The test bed's veths leave it for
an offload the switch's packet socket never applies, so h1 would drop the datagram."""
SENT_AT = struct.Struct("!q")
TIMESTAMP = struct.Struct("@qq")
"""struct timespec, SO_TIMESTAMPNS's control message."""


def other_traffic(sender: socket.socket, to: tuple[str, int], gap_s: float, stop: threading.Event, seed: int) -> None:
    """Datagrams through the switch at random moments, ``gap_s`` apart on average (exponential
    gaps), until ``stop``: the other frames that wake the switch while one is held."""
    rng = random.Random(seed)
    while not stop.wait(rng.expovariate(1 / gap_s)):
        with contextlib.suppress(OSError):
            sender.sendto(b"update", to)


def arrival_ns(receiver: socket.socket) -> tuple[bytes, int]:
    data, ancillary, _flags, _addr = receiver.recvmsg(64, socket.CMSG_SPACE(TIMESTAMP.size))
    for level, kind, value in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            seconds, nanoseconds = TIMESTAMP.unpack(value[: TIMESTAMP.size])
            return data, seconds * 1_000_000_000 + nanoseconds
    raise RuntimeError("the kernel gave no arrival time stamp")


def one_way_times(hosts: list[Host], frames: int, gap_s: float, seed: int) -> list[float]:
    """Seconds from h0's send to h1's kernel's arrival stamp, of each of ``frames`` datagrams."""
    rng = random.Random(seed)
    times: list[float] = []
    stop = threading.Event()
    with hosts[0].udp_socket(PORT) as sender, hosts[1].udp_socket(PORT) as receiver, \
            hosts[2].udp_socket(OTHER_PORT) as other, hosts[1].udp_socket(OTHER_PORT):
        for unchecked in (sender, other):
            unchecked.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
        receiver.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        receiver.settimeout(2.0)
        noise = threading.Thread(target=other_traffic, args=(other, (hosts[1].ipv4, OTHER_PORT), gap_s, stop, seed + 1), daemon=True)
        if gap_s:
            noise.start()
        try:
            for i in range(WARMUP_FRAMES + frames):
                time.sleep(rng.uniform(0.0, 0.002))
                sender.sendto(SENT_AT.pack(time.time_ns()), (hosts[1].ipv4, PORT))
                data, arrived = arrival_ns(receiver)
                if i >= WARMUP_FRAMES:
                    times.append((arrived - SENT_AT.unpack(data)[0]) / 1e9)
        finally:
            stop.set()
            if noise.is_alive():
                noise.join()
    return times


def measure(link_delay_ms: float, frames: int, gap_s: float, seed: int = 1) -> list[float]:
    """The one-way times beyond the two links' delay, in seconds."""
    target = delay_line_targets()[0]
    with tempfile.TemporaryDirectory() as scratch, standalone.testbed(3) as bed, \
            standalone.run_switch(target, bed.switch_ports, Path(scratch), k=params.DEFAULT_K, max_pool_size=params.MAX_POOL_SIZE,
                                  link_delay_ms=link_delay_ms) as switch:
        programming.program_forwarding(switch.control, list(bed.switch_ports), {h.mac: h.switch_port for h in bed.hosts})
        times = one_way_times(bed.hosts, frames, gap_s, seed)
    return [t - 2 * link_delay_ms / 1e3 for t in times]


def summary(label: str, excess_s: list[float]) -> str:
    late = sorted(x * 1e3 for x in excess_s)
    p50, p99 = (late[int(q * (len(late) - 1))] for q in (0.5, 0.99))
    return f"{label}: mean {statistics.mean(late):.3f}, median {p50:.3f}, p99 {p99:.3f}, max {late[-1]:.3f} ms"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=300)
    parser.add_argument("--link-delay-ms", type=float, default=10.0, help="each link's delay: a frame crosses two")
    parser.add_argument("--gap-ms", type=float, default=1.0, help="mean time between the other datagrams through the switch (0: none)")
    args = parser.parse_args(argv)
    if args.frames < 1 or args.link_delay_ms <= 0 or args.gap_ms < 0:
        parser.error("--frames must be >= 1, --link-delay-ms > 0 and --gap-ms >= 0")
    if os.geteuid() != 0:
        parser.error("the test bed's namespaces need root")
    gap_s = args.gap_ms / 1e3
    delayed = measure(args.link_delay_ms, args.frames, gap_s)
    undelayed = measure(0.0, args.frames, gap_s)
    print(f"{args.frames} frames h0 -> switch -> h1, other datagrams {args.gap_ms:g} ms apart; one-way time beyond the links' delay:")
    print(summary(f"  links of {args.link_delay_ms:g} ms", delayed))
    print(summary("  no link delay   ", undelayed))
    print(f"  the delay line's lateness (difference of the means): {(statistics.mean(delayed) - statistics.mean(undelayed)) * 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
