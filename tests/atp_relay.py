"""The embedded ATP switch between real UDP sockets on loopback, for ATP's socket drivers.

A thread receives what the workers (``ATPClient``) and parameter servers (``ParameterServer``
or ``python -m hosts.atp.server``) send, wraps each datagram in the frame the switch would
see on that host's port (its real loopback address as the source, so ``sender_table``
matches), runs ``ATPPipeline.process`` and sends each copy that leaves to the socket of the
host on that port. It plays the network's part: one face is where workers address their PS,
the other where the PS addresses the switch and where results come from. A ``Faults``
policy (tests/atp_network.py) may drop, duplicate or delay any datagram on any hop.

Each job's hosts get their own loopback addresses, 127.<net>.<job>.<worker + 1> and
127.<net>.<job>.200 for the PS, so the relay tells them apart by source address alone.
"""

from __future__ import annotations

import heapq
import subprocess
import itertools
import select
import socket
import threading
import time
from dataclasses import dataclass, field

from protocol.atp import params
from protocol.atp.packet import ATP_OFFSET
from protocol.packet import Endpoint, build_frame
from switches.atp.programming import Host, program_job
from switches.embedded.atp.pipeline import ATPPipeline
from switches.embedded.control_server import pipeline_handlers
from switches.remote_control import InProcessControl
from tests.atp_network import Faults

PS_HOST = 200
SWITCH_MAC = "02:00:00:00:00:fe"


def job_address(net: int, job_id: int, host: int) -> str:
    return f"127.{net}.{job_id}.{host}"


def mac_of(port: int) -> str:
    return f"02:00:00:00:{port >> 8:02x}:{port & 0xFF:02x}"


@dataclass
class RelayJob:
    job_id: int
    workers: list[tuple[str, int]]
    """Each worker's receiving (address, port), by rank."""
    ps: tuple[str, int]


@dataclass
class UDPRelay:
    """ATP's embedded pipeline relaying datagrams between loopback sockets, in a thread."""

    k: int
    pool_size: int
    net: int = 77
    faults: Faults = field(default_factory=Faults)
    ps_face_address: tuple[str, int] | None = None
    """Where workers address their PS (default: 127.<net>.0.1, any port)."""
    switch_face_address: tuple[str, int] | None = None
    """Where a PS addresses the switch, and results come from (default: 127.<net>.0.254, any port)."""

    def __post_init__(self) -> None:
        self.pipeline = ATPPipeline(self.k, self.pool_size)
        self.control = InProcessControl(pipeline_handlers(self.pipeline, lambda: {}))
        self.ps_face = self._socket(*(self.ps_face_address or (job_address(self.net, 0, 1), 0)))
        self.switch_face = self._socket(*(self.switch_face_address or (job_address(self.net, 0, 254), 0)))
        self._by_source: dict[str, int] = {}
        self._destination: dict[int, tuple[socket.socket, tuple[str, int]]] = {}
        self._ports = itertools.count()
        self._delayed: list = []
        self._order = itertools.count()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="atp-relay", daemon=True)
        self.frames = 0

    @staticmethod
    def _socket(address: str, port: int = 0) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        sock.bind((address, port))
        return sock

    @property
    def ps_address(self) -> tuple[str, int]:
        return self.ps_face.getsockname()

    @property
    def switch_address(self) -> tuple[str, int]:
        return self.switch_face.getsockname()

    def add_job(self, job: RelayJob) -> None:
        """Give the job's hosts switch ports and program the job as a network would
        (switches/atp/programming.py, through the control plane)."""
        hosts = []
        for address in job.workers:
            port = next(self._ports)
            self._by_source[address[0]] = port
            self._destination[port] = (self.switch_face, address)
            hosts.append(Host(port, mac_of(port), address[0], address[1]))
        ps_port = next(self._ports)
        self._by_source[job.ps[0]] = ps_port
        self._destination[ps_port] = (self.ps_face, job.ps)
        with self._lock:
            program_job(self.control, job.job_id, hosts, Host(ps_port, mac_of(ps_port), job.ps[0]))

    def start(self) -> UDPRelay:
        self._thread.start()
        return self

    def wait_quiet(self, quiet_s: float = 0.2, timeout_s: float = 10.0) -> None:
        """Return once the relay has passed no frame for ``quiet_s`` (or after ``timeout_s``):
        what its hosts sent before has reached the other side."""
        deadline = time.monotonic() + timeout_s
        seen, since = self.frames, time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.01)
            if self.frames != seen:
                seen, since = self.frames, time.monotonic()
            elif time.monotonic() - since >= quiet_s and not self._delayed:
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.ps_face.close()
        self.switch_face.close()

    def __enter__(self) -> UDPRelay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _hop(self, hop: str, payload: bytes, deliver: tuple) -> None:
        now = time.monotonic()
        for extra in self.faults.copies(hop, payload):
            if extra:
                heapq.heappush(self._delayed, (now + extra * 20, next(self._order), deliver))
            else:
                self._deliver(*deliver)

    def _deliver(self, kind: str, *event: object) -> None:
        if kind == "switch":
            self._switch(*event)
        else:
            sock, address, payload = event
            sock.sendto(payload, address)

    def _switch(self, in_port: int, frame: bytes) -> None:
        with self._lock:
            copies = self.pipeline.process(in_port, frame)
        self.frames += 1
        for port, out in copies:
            sock, address = self._destination[port]
            payload = out[ATP_OFFSET:]
            self._hop("switch->ps" if sock is self.ps_face else "switch->worker", payload, ("send", sock, address, payload))

    def _receive(self, sock: socket.socket, destination: Endpoint) -> None:
        payload, (address, udp_port) = sock.recvfrom(65536)
        port = self._by_source.get(address)
        if port is None:
            return
        frame = build_frame(Endpoint(mac_of(port), address, udp_port), destination, payload)
        self._hop("worker->switch" if sock is self.ps_face else "ps->switch", payload, ("switch", port, frame))

    def _run(self) -> None:
        # The frames carry ATP's ports, as on a real network; the relay's sockets are on ephemeral ones.
        ps_face = Endpoint(SWITCH_MAC, self.ps_address[0], params.PS_UDP_PORT)
        switch_face = Endpoint(SWITCH_MAC, self.switch_address[0], params.SWITCH_UDP_PORT)
        while not self._stop.is_set():
            wait = 0.005
            if self._delayed:
                wait = max(0.0, min(wait, self._delayed[0][0] - time.monotonic()))
            ready, _, _ = select.select([self.ps_face, self.switch_face], [], [], wait)
            for sock in ready:
                self._receive(sock, ps_face if sock is self.ps_face else switch_face)
            while self._delayed and self._delayed[0][0] <= time.monotonic():
                self._deliver(*heapq.heappop(self._delayed)[2])


def wait_bound(address: str, port: int, process: subprocess.Popen) -> None:
    """Until something is bound to (address, port) (the server's socket), or the process died."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1]
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            probe.bind((address, port))
        except OSError:
            return
        finally:
            probe.close()
        time.sleep(0.05)
    raise AssertionError(f"nothing bound {address}:{port} in 20 s")
