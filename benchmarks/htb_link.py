"""When frames cross one emulated link, measured, beside the simulated link's model of it.

An emulated link is an htb class on a veth pair (network/shaping.py). The simulated clock
models it with a token bucket (simulation/link.py, ``simulation.link_burst_bytes``); this
measures what the kernel does. In a namespace of its own (no Mininet, nothing shared) a
veth pair is shaped as the emulator shapes a link (``shape_interface``, the same tc
commands), and after an idle spell ``--frames`` frames of ``--bytes`` are sent back to back
into one end; the other end timestamps their arrivals in the kernel (SO_TIMESTAMPNS). Each
arrival after the first frame's send is printed beside the simulated link's departure for
the same frames: with the emulator's bucket (HTB_CBURST_BYTES) and with none (the wire).
Needs root (a network namespace).

    .venv/bin/python benchmarks/htb_link.py [--mbps 10] [--frames 12] [--bytes N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import simpy

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))

from network.shaping import HTB_CBURST_BYTES, probe_tc, shape_interface  # noqa: E402
import methods  # noqa: E402
from protocol.params import mbps_to_bps  # noqa: E402
from simulation.link import Arrivals, Link  # noqa: E402
from topologies.model import LinkSpec  # noqa: E402

SENDER, RECEIVER = "htbsend", "htbrecv"
ETHERTYPE = 0x88B5
"""IEEE's local experimental EtherType: nothing in the namespace answers or forwards it."""
SO_TIMESTAMPNS = 35
"""Linux's socket option (asm-generic/socket.h); Python's socket module does not name it."""
IDLE_S = 1.0
K = 256
"""The k of the emulated configs (configs/multi_tenant_emulated.yaml, ate_vs_workers.yaml)."""


def largest_frame(k: int) -> int:
    """The largest frame of k elements among the in-network protocols (their records' ``frame_bytes``)."""
    return max(protocol.frame_bytes(k) for protocol in methods.AGGREGATIONS if protocol.frame_bytes is not None)


def measure(frames: int, size: int, rate_bps: float) -> list[float]:
    """Inside the namespace: each frame's arrival, in seconds after the first one was sent."""
    receiver = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETHERTYPE))
    receiver.bind((RECEIVER, 0))
    receiver.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    receiver.settimeout(1.0 + 2 * frames * size * 8 / rate_bps)  # a lost frame ends the measurement, not hangs it
    sender = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sender.bind((SENDER, 0))
    frame = b"\xff" * 6 + b"\x02" * 6 + struct.pack("!H", ETHERTYPE) + bytes(size - 14)
    time.sleep(IDLE_S)  # the bucket fills
    first = time.time_ns()
    for _ in range(frames):
        sender.send(frame)
    arrivals = []
    for _ in range(frames):
        _data, ancillary, _flags, _address = receiver.recvmsg(size + 64, 64)
        seconds, nanoseconds = struct.unpack("qq", ancillary[0][2][:16])
        arrivals.append((seconds * 10**9 + nanoseconds - first) / 1e9)
    return arrivals


def simulated(frames: int, size: int, rate_bps: float, burst_bytes: float) -> list[float]:
    """The simulated link's arrivals for the same frames handed to it at once after an idle spell."""
    env = simpy.Environment()
    arrived: list[float] = []
    link = Link(env, Arrivals(env), rate_bps, 0.0, frames, 0.0, random.Random(1), lambda got: arrived.extend(env.now for _ in got),
                burst_bytes)
    for _ in range(frames):
        link.send(bytes(size))
    env.run()
    return arrived


def in_namespace(namespace: str, argv: list[str]) -> tuple[int, str]:
    done = subprocess.run(["ip", "netns", "exec", namespace, *argv], capture_output=True, text=True)
    return done.returncode, (done.stdout + done.stderr).strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mbps", type=float, default=10.0)
    parser.add_argument("--frames", type=int, default=12)
    parser.add_argument("--bytes", type=int, default=largest_frame(K), help=f"frame size (default: the largest in-network frame at k = {K})")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mbps <= 0 or args.frames < 1 or not 60 <= args.bytes <= 1514:
        parser.error("--mbps > 0, --frames >= 1 and --bytes in 60-1514, please")
    if args.inside:
        json.dump(measure(args.frames, args.bytes, mbps_to_bps(args.mbps)), sys.stdout)
        return 0
    if os.geteuid() != 0:
        parser.error("a network namespace needs root")
    namespace = f"htblink{os.getpid()}"
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))  # killed: the namespace still goes
    subprocess.run(["ip", "netns", "add", namespace], check=True)
    try:
        for argv_ in (["ip", "link", "add", "name", SENDER, "type", "veth", "peer", "name", RECEIVER],
                      ["ip", "link", "set", SENDER, "up"], ["ip", "link", "set", RECEIVER, "up"]):
            code, out = in_namespace(namespace, argv_)
            if code:
                raise RuntimeError(f"{' '.join(argv_)}: {out}")
        shape_interface(lambda a: in_namespace(namespace, list(a)), SENDER, LinkSpec(args.mbps, 0.0, 0.0, args.frames), probe_tc(),
                        loss_by_netem=False, delay_by_netem=False)
        code, out = in_namespace(namespace, [sys.executable, __file__, "--inside", "--mbps", str(args.mbps), "--frames", str(args.frames),
                                             "--bytes", str(args.bytes)])
        if code:
            raise RuntimeError(f"the measurement failed: {out}")
        measured = json.loads(out)
    finally:
        subprocess.run(["ip", "netns", "del", namespace], check=False)
    rate = mbps_to_bps(args.mbps)
    bucket, wire = simulated(args.frames, args.bytes, rate, HTB_CBURST_BYTES), simulated(args.frames, args.bytes, rate, 0.0)
    sys.stdout.write(f"{args.frames} frames of {args.bytes} bytes at {args.mbps:g} Mbit/s (a frame's time: "
                     f"{args.bytes * 8 / rate * 1e3:.3f} ms), ms after the first was sent\n")
    sys.stdout.write(f"| frame | htb on a veth, measured | simulated, htb's bucket ({HTB_CBURST_BYTES} bytes) | simulated, the wire |\n"
                     "|---:|---:|---:|---:|\n")
    for index, (m, b, w) in enumerate(zip(measured, bucket, wire)):
        sys.stdout.write(f"| {index} | {m * 1e3:.3f} | {b * 1e3:.3f} | {w * 1e3:.3f} |\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
