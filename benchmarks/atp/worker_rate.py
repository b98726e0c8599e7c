"""How many packets per second ATP's worker (hosts/atp/client.py, on its Python loop or its
native one, hosts/atp/native) sends and takes results for, at what CPU time per packet, and
how many sums its parameter server's core finishes, against what SwitchML's link rates ask
of them on each target.

One worker (n = 1, so its own packet is the whole sum) all-reduces over loopback UDP; a
responder process answers each packet at once with its result (the ACK flag set, the values
as they came), batched with recvmmsg/sendmmsg and numpy, so the worker's own loop is what
sets the rate; the worker's process's CPU time (user + system, ``time.process_time``) over the
all-reduce, per packet sent, is what it costs. The PS's core (hosts/atp/parameter_server.py) is timed alone, on full sums
handed to it in memory (its sockets cost what the worker's do). Each k is timed
``--repeats`` times and the best is kept (other processes share the machine). The rate a target's links ask for is one ATP frame per k elements each
way: ``link_bps / (8 * frame_bytes(k))``, at ``switches/<t>/__init__.py``'s ``link_rates``.

    .venv/bin/python -m benchmarks.atp.worker_rate [--packets 20000] [--repeats 3] [--data-path python native]
"""

from __future__ import annotations

import argparse
import multiprocessing
import select
import time

import numpy as np

from hosts.atp.client import ATPClient
from hosts.atp.parameter_server import ParameterServerCore
from hosts.mmsg import BatchSocket, datagram_socket
from protocol.atp import params
from protocol.atp.job import ATPParameters
from protocol.atp.packet import FIELD_OFFSETS, ATPHeader, encode_payload, frame_bytes, payload_bytes
from switches import targets

ADDRESS = "127.0.0.1"


def respond(k: int, ready, stop) -> None:
    """Answer every packet from the worker with its result until ``stop`` is set."""
    size = payload_bytes(k)
    receiving = datagram_socket((ADDRESS, 0))
    ready.send(receiving.getsockname())
    worker = ready.recv()
    sending = datagram_socket((ADDRESS, 0), worker)
    ready.send(sending.getsockname())
    dtype = np.dtype((np.void, size))
    rx, tx = BatchSocket(receiving, dtype, 512), BatchSocket(sending, dtype, 512)
    tx_rows = tx.tx.view(np.uint8).reshape(-1, size)
    flags = FIELD_OFFSETS["flags"]
    poller = select.poll()
    poller.register(receiving, select.POLLIN)
    while not stop.is_set():
        count = rx.receive()
        if count == 0:
            poller.poll(50)
            continue
        rows = np.frombuffer(rx.rx[:count].tobytes(), np.uint8).reshape(count, size)
        tx_rows[:count] = rows
        tx_rows[:count, flags] |= params.FLAG_ACK
        tx.send(count)


def measure(k: int, packets: int, window: int, data_path: str) -> tuple[float, float]:
    """Packets per second of one all-reduce of ``packets`` packets on the loop ``data_path``,
    and the worker's CPU µs per packet sent."""
    parent, child = multiprocessing.Pipe()
    stop = multiprocessing.Event()
    responder = multiprocessing.Process(target=respond, args=(k, child, stop), daemon=True)
    responder.start()
    try:
        ps = parent.recv()
        parameters = ATPParameters(k=k, pool_size=params.DEFAULT_POOL_SIZE, job_id=1, window=window, exponent=0,
                                   resend_timeout_ms=200.0, congestion_control=False, ecn_threshold=0)
        # the worker receives from the responder's sending socket: bind first, then tell it
        receiving = datagram_socket((ADDRESS, 0))
        worker_port = receiving.getsockname()
        receiving.close()
        parent.send(worker_port)
        switch = parent.recv()
        with ATPClient(0, 1, parameters, ps, switch, bind_ipv4=ADDRESS, bind_port=worker_port[1], data_path=data_path) as client:
            tensor = np.arange(k * packets, dtype=np.int32)
            cpu = time.process_time()
            result = client.allreduce(tensor)
            cpu = time.process_time() - cpu
        assert np.array_equal(result.int_sum, tensor), "the responder echoes: the sum of one worker is its tensor"
        sent = result.stats.packets_sent
        return sent / result.stats.tat_s, cpu / sent * 1e6
    finally:
        stop.set()
        responder.join(timeout=5)


def measure_ps(k: int, packets: int, window: int) -> float:
    """Full sums per second the PS core finishes (each answered with its result)."""
    n = 8
    core = ParameterServerCore(1, n, k, params.DEFAULT_POOL_SIZE, window=window)
    values = np.arange(k, dtype=np.int32)
    parts = [encode_payload(ATPHeader((1 << n) - 1, n, 0, 1, seq, seq % window, params.NO_INDEX), values)
             for seq in range(1, packets + 1)]
    started = time.perf_counter()
    for part in parts:
        core.receive(part)
    elapsed = time.perf_counter() - started
    assert core.stats.sequences_from_switch == packets
    return packets / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--packets", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--window", type=int, default=params.DEFAULT_WINDOW)
    parser.add_argument("--data-path", nargs="+", choices=("python", "native"), default=["python", "native"],
                        help="the worker's loops to time (protocol.data_path)")
    args = parser.parse_args()
    ks = sorted({k for target in targets.REGISTRY.values() for k in target.link_rates})
    print(f"ATP worker, W = {args.window}, {args.packets:,} packets per all-reduce, best of {args.repeats}")
    print("| k | worker loop | worker packets/s | worker CPU µs/packet | PS core sums/s | "
          + " | ".join(f"{name} needs, packets/s (at Mbit/s)" for name in sorted(targets.REGISTRY)) + " |")
    print("|---|---|---|---|---|" + "---|" * len(targets.REGISTRY))
    for k in ks:
        ps_rate = max(measure_ps(k, args.packets, args.window) for _ in range(args.repeats))
        cells = []
        for name in sorted(targets.REGISTRY):
            mbps = targets.REGISTRY[name].link_rates.get(k)
            cells.append("-" if mbps is None else f"{mbps * 1e6 / (8 * frame_bytes(k)):,.0f} ({mbps:g})")
        for data_path in args.data_path:
            rate, cpu_us = max((measure(k, args.packets, args.window, data_path) for _ in range(args.repeats)), key=lambda m: m[0])
            print(f"| {k} | {data_path} | {rate:,.0f} | {cpu_us:.1f} | {ps_rate:,.0f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
