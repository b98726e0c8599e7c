"""ATP's parameter server as a process: ``ParameterServerCore`` over UDP, one per job.

    python -m hosts.atp.server SPEC.json [--index 0] [--stats PS-STATS.json] [--bind IPV4]

It runs on the host the network attaches to the aggregating switch for the job (its
record's ``servers_per_job``), reads the workers' spec (the job's parameters, the switch's
address), and serves until SIGTERM or SIGINT, then logs its statistics. Its counts (full and
partial sums, collided sequences, repeated results, what it dropped: ``counts``, the names
the simulated clock's ``ServerHostCore.stats`` gives) are written as JSON to ``--stats`` as
hosts/server.py writes them for the runner, which runs ``parameter_server`` (ATP's
``Aggregation.server``). Workers address their packets to it on ``PS_UDP_PORT``; the switch forwards what it
could not finish with the workers' addresses intact, so the receiving socket is unconnected
and hears anyone. The core drops what is not a part of its job (``ignored``), this loop what
has the wrong size (``malformed``): a hostile datagram costs a count, never the process. Its
results go to the switch (``SWITCH_UDP_PORT``), which frees the aggregator and multicasts them.
"""

from __future__ import annotations

import argparse
import json
import logging
import select
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from hosts.atp.job import job_parameters
from hosts.atp.parameter_server import ParameterServerCore, PSStats, server_counts
from hosts.atp.sockets import PayloadSockets
from hosts.mmsg import errno_counts
from hosts.server import run_server
from protocol.atp import params
from protocol.atp.job import ATPParameters
from protocol.worker_spec import WorkerSpec

log = logging.getLogger(__name__)

BATCH = 256
"""Datagrams one recvmmsg or sendmmsg may carry."""
IDLE_POLL_MS = 100
"""How long an idle server sleeps before it looks whether it was told to stop."""


@dataclass
class ServerStats:
    """What the server saw: its core's counts and the datagrams its loop dropped."""

    core: PSStats
    datagrams: int = 0
    malformed: int = 0
    results_sent: int = 0
    socket_errors: dict[str, int] | None = None


class ParameterServer:
    """The PS of one ATP job on its sockets: ``run`` until ``stop`` is set (methods/aggregation.py's ``Server``)."""

    def __init__(self, parameters: ATPParameters, n_workers: int, switch: tuple[str, int],
                 bind: tuple[str, int] = ("0.0.0.0", params.PS_UDP_PORT)) -> None:
        self.core = ParameterServerCore.for_job(parameters, n_workers)
        self._io = PayloadSockets(parameters.k, BATCH, bind, switch)
        self.stats = ServerStats(self.core.stats)
        self.job_id = parameters.job_id

    def counts(self) -> dict[str, int]:
        """Its counts so far, as the simulated clock's PS gives them (``server_counts``)."""
        return server_counts(self.core.stats, self.stats.results_sent, self.stats.malformed)

    @property
    def address(self) -> tuple[str, int]:
        return self._io.receiving.getsockname()

    def run(self, stop: threading.Event) -> ServerStats:
        """Answer every part the switch forwards, in batches, until ``stop`` is set."""
        io, stats = self._io, self.stats
        poller = select.poll()
        poller.register(io.receiving, select.POLLIN)
        while not stop.is_set():
            count = io.rx.receive()
            if count == 0:
                poller.poll(IDLE_POLL_MS)
                continue
            stats.datagrams += count
            out: list[bytes] = []
            for i in range(count):
                payload = io.payload(i)
                if payload is None:
                    stats.malformed += 1
                    continue
                out += self.core.receive(payload)
            io.send(out)  # a refused result is a lost one: the workers' resends ask again
            stats.results_sent += len(out)
        stats.socket_errors = errno_counts(io.refusals)
        log.info("ATP job %d's parameter server stopped: %s", self.job_id, json.dumps(asdict(stats)))
        return stats

    def close(self) -> None:
        self._io.close()


def parameter_server(spec: WorkerSpec, index: int = 0, bind_ipv4: str = "0.0.0.0") -> ParameterServer:
    """ATP's ``Aggregation.server``: the job's PS (index 0, its only server) on this host, its socket bound."""
    if index != 0:
        raise ValueError(f"an ATP job has one parameter server (index 0), not index {index}")
    parameters = job_parameters(spec)
    server = ParameterServer(parameters, spec.n_workers, (spec.switch_ipv4, params.SWITCH_UDP_PORT), (bind_ipv4, params.PS_UDP_PORT))
    log.info("ATP job %d's parameter server on %s:%d for %d workers", parameters.job_id, *server.address, spec.n_workers)
    return server


def serve(spec: WorkerSpec, index: int = 0, stats_path: Path | None = None, bind_ipv4: str = "0.0.0.0") -> ServerStats:
    """The job's PS until SIGTERM or SIGINT, its counts written to ``stats_path`` as hosts/server.py writes them; its statistics."""
    server = parameter_server(spec, index, bind_ipv4)
    run_server(server, stats_path)
    return server.stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path, help="the job's workers' spec (protocol/worker_spec.py)")
    parser.add_argument("--index", type=int, default=0, help="which of the job's servers this is (ATP: 0)")
    parser.add_argument("--stats", type=Path, help="where to write its counts as JSON (on SIGUSR1 and on exit)")
    parser.add_argument("--bind", default="0.0.0.0", help="the address to serve on (default: every address of the host)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s atp-ps %(name)s %(levelname)s %(message)s")
    try:
        serve(WorkerSpec.read(args.spec), args.index, args.stats, args.bind)
    except (OSError, ValueError) as exc:
        print(f"hosts.atp.server: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
