"""How many SwitchML updates per second a switch target aggregates, at --k elements per packet.

Creates its own namespaces and veth pairs (base/netns.py), starts the switch,
programs one job of n ranks through switches/switchml/programming.py and drives it from this one
process: pre-built update frames, one raw socket per rank, self-clocked like the worker
protocol — when rank 0 receives a slot's result, all ranks send that slot's next round
(the other set). A stall (no result for STALL_S) resends every outstanding update, as the
workers' timers would. Ranks other than 0 never read their results: UDP sinks absorb them
so the hosts' kernels stay quiet.

Run as root:  .venv/bin/python benchmarks/switchml/switch_throughput.py [--target embedded|bmv2|ebpf] [--ranks 2 4 8] [--seconds 5]
Writes results/benchmarks/switch_throughput-<target>.csv and .md. For bmv2, put simple_switch
on PATH first (the Vagrant VM has it; BMV2_BUILD=perf with the prebuilt toolchain picks its
optimised build, and the table records which simple_switch ran). The eBPF switch has no
process: its CPU time is its program's run time from the kernel's BPF statistics
(switches/ebpf/stats.py), reported as system time.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import logging
import select
import socket
import struct
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

import numpy as np  # noqa: E402

from protocol import params  # noqa: E402
from protocol.switchml import params as switchml_params  # noqa: E402
from protocol.packet import build_frame, Endpoint  # noqa: E402
from protocol.switchml.packet import encode_payload, frame_bytes, SWITCHML_FIELD_OFFSETS, SWITCHML_OFFSET, SwitchMLHeader  # noqa: E402
from switches import standalone  # noqa: E402
from switches.switchml import programming  # noqa: E402
from network.port_counters import SETTLE_S, account_switch, read_ports  # noqa: E402
from switches.standalone import run_switch  # noqa: E402
from switches.targets import REGISTRY, lookup  # noqa: E402
from base.netns import Host  # noqa: E402

log = logging.getLogger("switch_throughput")

JOB = 1
STALL_S = 0.02
RESULT_FIELDS = struct.Struct("!BBxxH")
"""msg_type, shadow_set, slot at the start of switchml_h."""
SEQ = struct.Struct("!I")
SEQ_OFFSET = SWITCHML_FIELD_OFFSETS["seq"]
"""switchml_h.seq: every version of a slot carries a newer one, as the worker library's do
(the switch drops an update whose seq is not newer than its cell's last version)."""
OUTPUT_DIR = REPO_ROOT / "results" / "benchmarks"


@dataclass
class Measurement:
    target: str
    build: str
    """The simple_switch that ran (bmv2), or the Python that ran the embedded switch."""
    ranks: int
    k: int
    window_slots: int
    seconds: float
    rounds: int
    updates_per_s: float
    """Updates the switch aggregated per second; it sends as many result copies (n per round)."""
    elements_per_s: float
    stalls: int
    switch_input_lost: int
    """Frames the switch's ports received that its pipeline never counted (lost inside it)."""
    retx_ignored: int
    unicast_results: int
    switch_user_us_per_update: float
    switch_sys_us_per_update: float
    switch_cpu_share: float
    """Fraction of one core the switch got while measured (the rest went to other work)."""
    updates_per_switch_cpu_s: float
    """Updates per second of switch CPU time: what one dedicated core would sustain."""


def build_frames(hosts: list[Host], window: int, k: int) -> list[list[list[bytearray]]]:
    """frames[slot][set][rank]: every update the generator sends, built once (only seq changes)."""
    switch = Endpoint(params.SWITCH_MAC, params.SWITCH_IPV4, switchml_params.UDP_PORT_BASE)
    rng = np.random.default_rng(0)
    return [
        [
            [
                bytearray(build_frame(
                    Endpoint(h.mac, h.ipv4, switchml_params.WORKER_UDP_PORT),
                    switch,
                    encode_payload(SwitchMLHeader(switchml_params.MSG_UPDATE, shadow_set, JOB, slot, k, 0, slot), rng.integers(-1000, 1000, k)),
                ))
                for h in hosts
            ]
            for shadow_set in (0, 1)
        ]
        for slot in range(window)
    ]


def drive(
    sockets: list[socket.socket], frames: list[list[list[bytearray]]], seconds: float, warmup: float, on_measure: Callable[[], None]
) -> tuple[int, float, int]:
    """Self-clocked load; returns (rounds completed in the measured window, its length, stalls).

    ``on_measure`` is called when the measured window starts and when it ends.
    """
    sends = [s.send for s in sockets]
    listener = sockets[0]
    listener.setblocking(False)
    recv_into = listener.recv_into
    buffer = bytearray(2048)
    window = len(frames)
    current = [0] * window
    version = [0] * window
    """Rounds each slot has started: its set is version % 2, its seq version * window + slot."""
    for slot in range(window):
        for send, frame in zip(sends, frames[slot][0]):
            send(frame)
    rounds = stalls = 0
    start = time.monotonic()
    measure_from, end = start + warmup, start + warmup + seconds
    rounds_at_start = None
    poll = select.poll()
    poll.register(listener, select.POLLIN)
    while True:
        now = time.monotonic()
        if rounds_at_start is None and now >= measure_from:
            rounds_at_start, measure_from = rounds, now
            on_measure()
        if now >= end:
            on_measure()
            return rounds - rounds_at_start, now - measure_from, stalls
        if not poll.poll(STALL_S * 1000):
            stalls += 1
            for slot in range(window):
                for send, frame in zip(sends, frames[slot][current[slot]]):
                    send(frame)
            continue
        # At most a pool's worth of results per wake-up, so the clock is read even when the
        # switch answers inline: the eBPF switch runs in the sender's softirq, so the next
        # round's results are queued before its send() returns and the queue never drains.
        for _ in range(window):
            try:
                recv_into(buffer)
            except BlockingIOError:
                break
            msg_type, shadow_set, slot = RESULT_FIELDS.unpack_from(buffer, SWITCHML_OFFSET)
            if msg_type != switchml_params.MSG_RESULT or slot >= window or shadow_set != current[slot]:
                continue  # a duplicate (unicast answer to a resend) or stray frame
            current[slot] = next_set = shadow_set ^ 1
            version[slot] += 1
            rounds += 1
            seq = version[slot] * window + slot
            for send, frame in zip(sends, frames[slot][next_set]):
                SEQ.pack_into(frame, SEQ_OFFSET, seq)
                try:
                    send(frame)
                except BlockingIOError:
                    pass  # lost like on a wire; the stall timer resends


def measure(target: str, n: int, k: int, window: int, seconds: float, warmup: float, log_dir: Path, profile: Path | None) -> Measurement:
    described = lookup(target)
    options = described.start_options({"log_level": "WARNING", "profile": profile})
    with standalone.testbed(n) as bed, contextlib.ExitStack() as stack:
        for host in bed.hosts[1:]:
            sink = stack.enter_context(host.udp_socket(switchml_params.WORKER_UDP_PORT))
            sink.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        max_pool_size = described.max_pool_size or max(window, 1)  # bmv2: its build of the most it can have
        switch = stack.enter_context(run_switch(target, bed.switch_ports, log_dir, name=f"{target}-n{n}", k=k,
                                                max_pool_size=max_pool_size, **options))
        control = switch.control
        programming.program_forwarding(control, list(bed.switch_ports), {})
        workers = [programming.WorkerPort(h.index, h.switch_port, h.mac, h.ipv4) for h in bed.hosts]
        programming.program_aggregation(control, programming.JobProgram(JOB, workers))
        sockets = [stack.enter_context(h.raw_socket()) for h in bed.hosts]
        frames = build_frames(bed.hosts, window, k)
        interfaces = list(bed.switch_ports.values())
        ports_before = read_ports(interfaces)
        cpu: list[tuple[float, float]] = []
        switch_cpu = stack.enter_context(described.cpu_meter(switch.pid, interfaces))
        rounds, elapsed, stalls = drive(sockets, frames, seconds, warmup, lambda: cpu.append(switch_cpu()))
        time.sleep(SETTLE_S)  # the switch drains before its frames are accounted
        counts = programming.read_event_counters(control)
        frames_accounted = account_switch(ports_before, read_ports(interfaces), interfaces, counts, switchml_params.INGRESS_NOTES)
    switch_cpu_s = sum(cpu[1]) - sum(cpu[0])
    return Measurement(
        target=target,
        build=described.describe_build(),
        ranks=n,
        k=k,
        window_slots=window,
        seconds=round(elapsed, 3),
        rounds=rounds,
        updates_per_s=round(rounds * n / elapsed),
        elements_per_s=round(rounds * k / elapsed),
        stalls=stalls,
        switch_input_lost=frames_accounted["input_lost"],
        retx_ignored=counts["EV_RETX_IGNORED"],
        unicast_results=counts["EV_RESULT_UNICAST"],
        switch_user_us_per_update=round((cpu[1][0] - cpu[0][0]) * 1e6 / max(rounds * n, 1), 2),
        switch_sys_us_per_update=round((cpu[1][1] - cpu[0][1]) * 1e6 / max(rounds * n, 1), 2),
        switch_cpu_share=round(switch_cpu_s / elapsed, 2),
        updates_per_switch_cpu_s=round(rounds * n / switch_cpu_s) if switch_cpu_s else 0.0,
    )


def write_tables(rows: list[Measurement], output_dir: Path) -> None:
    output_dir.mkdir(parents=True, exist_ok=True)
    fields = list(asdict(rows[0]))
    stem = f"switch_throughput-{rows[0].target}"
    with (output_dir / f"{stem}.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(asdict(r) for r in rows)
    lines = ["| " + " | ".join(fields) + " |", "|" + "---|" * len(fields)]
    lines += ["| " + " | ".join(str(v) for v in asdict(r).values()) + " |" for r in rows]
    table = "\n".join(lines)
    (output_dir / f"{stem}.md").write_text(
        f"# {rows[0].target} switch throughput\n\n"
        f"Frame {frame_bytes(rows[0].k)} bytes; one generator process, self-clocked; 2-core machine shared "
        "with other work, so expect noise. elements_per_s = aggregated tensor elements per second.\n\n" + table + "\n"
    )
    print(table)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=list(REGISTRY), default=max(REGISTRY.values(), key=lambda t: t.auto_preference).name,
                        help="default: the target that runs anywhere (auto's last choice)")
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--k", type=int, default=switchml_params.DEFAULT_K)
    parser.add_argument("--window", type=int, default=switchml_params.DEFAULT_POOL_SIZE, help="slots in flight (pool size used)")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--profile", action="store_true", help="run the switch under cProfile (slower) and print the top functions")
    parser.add_argument("--output-dir", type=Path, default=OUTPUT_DIR)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/switch_throughput"))
    args = parser.parse_args()
    described = lookup(args.target)
    try:
        described.check_k(args.k)
    except ValueError as error:
        parser.error(str(error))
    if args.profile and "profile" not in described.options:
        parser.error(f"{args.target} cannot be profiled from Python")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    rows = []
    for n in args.ranks:
        profile = args.log_dir / f"switch-n{n}.prof" if args.profile else None
        row = measure(args.target, n, args.k, args.window, args.seconds, args.warmup, args.log_dir, profile)
        log.info("%s", row)
        rows.append(row)
        if profile is not None:
            import pstats

            pstats.Stats(str(profile)).sort_stats("tottime").print_stats(15)
    if not args.profile:
        write_tables(rows, args.output_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
