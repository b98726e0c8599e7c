"""Toy sum: the smallest in-network aggregation protocol, all its layers in this one file.

tests/test_plugins.py registers it in temporary copies of the registries, to show that a
protocol is its own files plus registry lines: its typed job parameters, its record
(methods/aggregation.py), its worker (the host side: its own, not the ring's or SwitchML's,
sans-IO, so that it is also the core the simulated clock's generic driver runs), its
switches' programmer, and its program on the embedded target (``ToySwitch``, built from the
embedded switch's registers, traffic manager and control plane): in memory as a
``SimulatedSwitch``, and in the switch process on a Mininet network as a ``PortProgram``.

The wire format: an Ethernet frame of EtherType 0x88B5 (IEEE's local experimental), then
job id (16 bits), rank (8), workers (8), chunk (32), then k big-endian int32 values. The
switch adds each chunk's values into the slot ``chunk % pool`` (the switch's memory) and,
once every worker's arrived, multicasts the sum to the job's group (its workers, and its
servers where its record asks for some) and frees the slot; every other frame it floods
(ordinary traffic). Unlike SwitchML it has no shadow copies, no window (a tensor has at
most as many chunks as the switch has slots), no retransmission and no duplicate
detection: the test's links lose nothing. It runs one job on a star.

A worker on a Mininet host is ``python -m tests.toy_aggregation SPEC --rank R --go PATH
--output PATH`` (``main``): its own process, over a raw Ethernet socket (hosts/ethernet.py).
"""

from __future__ import annotations

import argparse
import struct
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from hosts.ethernet import EthernetEndpoint
from hosts.stats import JobStats
from methods import verification
from methods.aggregation import Aggregation
from methods.method import Method, in_network
from protocol.worker_spec import WorkerSpec
from switches.control import SwitchControl
from switches.embedded.control_server import pipeline_handlers
from switches.embedded.program import ProgramView
from switches.embedded.registers import CellRegister, Counter
from switches.embedded.traffic_manager import TrafficManager
from switches.fabric import Fabric, FabricJob
from switches.remote_control import InProcessControl
from switches.target import Transmit

NAME = "toysum"
ETHERTYPE = 0x88B5
ETHERNET = struct.Struct("!6s6sH")
HEADER = struct.Struct("!HBBI")
BROADCAST = b"\xff" * 6
RESULT_GROUP = 1
"""The multicast group results go to: every worker's port, and its servers'."""
FLOOD_GROUP = 2
"""Every port: ordinary frames leave on all of them but the one they came in on."""
FRAME_BUFFER_BYTES = 2048
POLL_S = 0.01


@dataclass(frozen=True)
class ToyParameters:
    """Toy sum's typed job parameters: what its workers' spec carries."""

    k: int
    pool_size: int
    job_id: int

    @classmethod
    def from_config(cls, protocol: Mapping[str, Any], data_path: str) -> ToyParameters:
        return cls(k=protocol["k"], pool_size=protocol["pool_size"], job_id=protocol["job_id"])

    @classmethod
    def read(cls, section: Mapping[str, Any]) -> ToyParameters:
        return cls(**section)


def frame(job_id: int, rank: int, n_workers: int, chunk: int, values: np.ndarray) -> bytes:
    return ETHERNET.pack(BROADCAST, bytes([2, 0, 0, 0, 0, rank]), ETHERTYPE) + HEADER.pack(job_id, rank, n_workers, chunk) + \
        values.astype(">i4").tobytes()


def is_toy(data: bytes | bytearray | memoryview) -> bool:
    return len(data) >= ETHERNET.size and ETHERNET.unpack_from(data)[2] == ETHERTYPE


def parse(data: bytes | bytearray | memoryview, k: int) -> tuple[int, int, int, int, np.ndarray] | None:
    """(job, rank, workers, chunk, values), or None for a frame not the toy's or the wrong size."""
    offset = ETHERNET.size + HEADER.size
    if len(data) != offset + 4 * k or not is_toy(data):
        return None
    return (*HEADER.unpack_from(data, ETHERNET.size), np.frombuffer(data, ">i4", k, offset).astype(np.int32))


class ToyWorker:
    """One rank of a toy-sum job, sans-IO: the frames to send, then the results received."""

    def __init__(self, spec: WorkerSpec, rank: int) -> None:
        assert spec.protocol is not None
        self.parameters = ToyParameters.read(spec.protocol)
        self.rank, self.n_workers = rank, spec.n_workers
        self._result: np.ndarray | None = None
        self._missing: set[int] = set()
        self._stats = JobStats()

    def frames(self, tensor: np.ndarray) -> list[bytes]:
        """Every chunk of ``tensor`` (int32, a multiple of k long), one frame each."""
        k = self.parameters.k
        chunks = tensor.reshape(-1, k)
        self._result = np.zeros_like(tensor)
        self._missing = set(range(len(chunks)))
        return [frame(self.parameters.job_id, self.rank, self.n_workers, i, chunk) for i, chunk in enumerate(chunks)]

    def receive(self, data: bytes) -> None:
        parsed = parse(data, self.parameters.k)
        if parsed is None or self._result is None:
            return
        job, _rank, _n, chunk, values = parsed
        if job == self.parameters.job_id and chunk in self._missing:
            self._result[chunk * self.parameters.k:(chunk + 1) * self.parameters.k] = values
            self._missing.discard(chunk)

    def result(self) -> np.ndarray | None:
        """The all-reduced tensor once every chunk's sum came back."""
        return self._result if self._result is not None and not self._missing else None

    # -- as a ``HostCore`` (methods/aggregation.py), for the simulated clock's driver ------

    hold_s = 0.0
    """Its loop never holds."""

    def start(self, tensor: np.ndarray, now: float) -> tuple[list[bytes], None]:
        """Every chunk at once (no timers: the toy never resends)."""
        sent = self.frames(tensor)
        self._stats = JobStats(packets_sent=len(sent), bytes_sent=sum(map(len, sent)))
        return sent, None

    def step(self, now: float, received: list[bytes]) -> tuple[list[bytes], None]:
        for data in received:
            self._stats.packets_received += 1
            self._stats.bytes_received += len(data)
            self.receive(data)
        return [], None

    @property
    def done(self) -> bool:
        return self.result() is not None

    def outcome(self) -> tuple[np.ndarray, None, JobStats]:
        return self.result(), None, self._stats


class ToyMethod:
    """One rank on a network host (its record's ``host``, ``cls(spec, rank)``): the sans-IO
    worker over a raw Ethernet socket of the toy's EtherType (``listen``: opened on first use,
    so a test drives ``worker`` in memory without one)."""

    def __init__(self, spec: WorkerSpec, rank: int) -> None:
        self.worker = ToyWorker(spec, rank)
        self.timeout_s = spec.job_timeout_s
        self.endpoint: EthernetEndpoint | None = None

    def listen(self) -> EthernetEndpoint:
        """The host's socket for the toy's frames, opened once: results sent before it is open are lost."""
        if self.endpoint is None:
            self.endpoint = EthernetEndpoint(ETHERTYPE)
        return self.endpoint

    def allreduce(self, tensor: np.ndarray) -> tuple[np.ndarray, None, dict[str, int]]:
        endpoint = self.listen()
        frames = self.worker.frames(tensor)
        for data in frames:
            endpoint.send(data)
        deadline = time.monotonic() + self.timeout_s
        while (result := self.worker.result()) is None:
            data = endpoint.receive(deadline)
            if data is None:
                raise TimeoutError(f"toy sum rank {self.worker.rank}: not every chunk's sum came back within {self.timeout_s:g} s")
            self.worker.receive(data)
        return result, None, {"packets_sent": len(frames)}

    def close(self) -> None:
        if self.endpoint is not None:
            self.endpoint.close()


class ToySwitch(ProgramView):
    """Toy sum's program on the embedded target: its registers and the embedded switch's
    traffic manager and control plane; a ``PortProgram`` (the switch process receives each
    frame into ``frame`` and calls ``process``) and a ``SimulatedSwitch`` (``receive``)."""

    def __init__(self, *, k: int, max_pool_size: int, seed: int | None = None) -> None:
        self.k, self.pool = k, max_pool_size
        self.frame = bytearray(FRAME_BUFFER_BYTES)
        self.traffic_manager = TrafficManager()
        self.ports: dict[int, Transmit] = {}
        self.tx_errors = 0
        self._tables = {}
        self._registers = {r.name: r for r in (CellRegister("ToyIngress.sum", max_pool_size * k),
                                               CellRegister("ToyIngress.count", max_pool_size))}
        self._counters = {"ToyIngress.packets": Counter("ToyIngress.packets", 1)}

    def connect(self, port: int, transmit: Transmit) -> None:
        self.ports[port] = transmit

    def receive(self, port: int, data: bytes) -> None:
        self.frame[:len(data)] = data
        self.process(port, len(data))

    def process(self, in_port: int, length: int) -> None:
        data = bytes(self.frame[:length])
        if not is_toy(data):
            for _rid, out in self.traffic_manager.replicas(FLOOD_GROUP):
                if out != in_port:
                    self._send(out, data)
            return
        parsed = parse(data, self.k)
        if parsed is None:
            return
        self.counter("ToyIngress.packets").count(0, length)
        job, _rank, n_workers, chunk, values = parsed
        slot = chunk % self.pool
        sums, count = self.register("ToyIngress.sum").cells, self.register("ToyIngress.count").cells
        cells = slice(slot * self.k, (slot + 1) * self.k)
        added = (np.array(sums[cells], dtype=np.int64) + values) & 0xFFFFFFFF  # bit<32> adds wrap
        sums[cells] = added.tolist()
        count[slot] += 1
        if count[slot] == n_workers:
            total = added.astype(np.uint32).view(np.int32)
            sums[cells], count[slot] = [0] * self.k, 0
            for _rid, out in self.traffic_manager.replicas(RESULT_GROUP):
                self._send(out, frame(job, 0, n_workers, chunk, total))

    def _send(self, port: int, data: bytes) -> None:
        transmit = self.ports.get(port)
        if transmit is None:
            return
        try:
            transmit(memoryview(data))
        except OSError:
            self.tx_errors += 1

    def stats(self) -> dict:
        return {"rx_drops": {str(port): 0 for port in self.ports}, "tx_errors": self.tx_errors}

    def control(self, command_log: Path | None = None) -> SwitchControl:
        return InProcessControl(pipeline_handlers(self, self.stats), command_log)


def core(spec: WorkerSpec, rank: int, host: Any, switch: Any) -> ToyWorker:
    """Its record's ``core``: its worker, which needs no address (its frames are broadcast)."""
    return ToyWorker(spec, rank)


def reset_switch(control: SwitchControl, parameters: ToyParameters) -> None:
    """Its record's ``reset_switch``: every slot's sum and count to zero."""
    control.registers_reset(["ToyIngress.sum", "ToyIngress.count"])


def program_fabric(controls: Mapping[str, SwitchControl], fabric: Fabric, jobs: Sequence[FabricJob]) -> None:
    """Its record's ``program_fabric``, on a star: ordinary frames flooded, results to the
    ports of the job's workers and servers (one multicast node with all of them)."""
    if len(fabric.switches) != 1 or len(jobs) > 1:
        raise ValueError(f"toy sum runs one job on a star; got {len(fabric.switches)} switches and {len(jobs)} jobs")
    switch = fabric.aggregator.name
    control = controls[switch]
    control.mc_mgrp_create(FLOOD_GROUP)
    control.mc_node_associate(FLOOD_GROUP, control.mc_node_create(0, list(fabric.ports[switch])))
    for job in jobs:
        control.mc_mgrp_create(RESULT_GROUP)
        ports = sorted({fabric.towards[switch, name] for name in (*job.hosts, *job.servers)})
        control.mc_node_associate(RESULT_GROUP, control.mc_node_create(0, ports))


def server_output(spec: WorkerSpec, index: int) -> Path:
    """Where server ``index`` of the spec's job writes the sums it saw: beside the workers' inputs."""
    return Path(spec.inputs[0]).parent / f"server-job{ToyParameters.read(spec.protocol or {}).job_id}-{index}.npy"


class ToyServer:
    """A server of a toy job (the served variant's ``Aggregation.server``, methods/aggregation.py's
    ``Server``): it receives the job's results as its workers do, and writes them
    (``server_output``) once all came back; its counts are the chunks it got."""

    def __init__(self, spec: WorkerSpec, index: int) -> None:
        self._parameters = ToyParameters.read(spec.protocol or {})
        self._output = server_output(spec, index)
        elements = np.load(spec.inputs[0], mmap_mode="r").size
        self._sums = np.zeros(elements, dtype=np.int32)
        self._missing = set(range(elements // self._parameters.k))
        self._chunks = len(self._missing)
        self._deadline = time.monotonic() + spec.connect_timeout_s + spec.job_timeout_s
        self._endpoint = EthernetEndpoint(ETHERTYPE)
        print("ready", flush=True)

    def run(self, stop: threading.Event) -> None:
        k, job_id = self._parameters.k, self._parameters.job_id
        while self._missing and not stop.is_set():
            data = self._endpoint.receive(min(self._deadline, time.monotonic() + POLL_S))
            if data is None:
                if time.monotonic() >= self._deadline:
                    raise TimeoutError(f"toy server: {len(self._missing)} chunk(s) of job {job_id} never came back")
                continue
            parsed = parse(data, k)
            if parsed is not None and parsed[0] == job_id and parsed[3] in self._missing:
                self._sums[parsed[3] * k:(parsed[3] + 1) * k] = parsed[4]
                self._missing.discard(parsed[3])
        if not self._missing:
            np.save(self._output, self._sums)

    def counts(self) -> dict[str, int]:
        return {"chunks_received": self._chunks - len(self._missing)}

    def close(self) -> None:
        self._endpoint.close()


def main(argv: list[str] | None = None) -> int:
    """One rank on a network host: its socket opened, "ready" printed, then, once ``--go``
    exists (every rank listens before any sends), its tensor all-reduced into ``--output``."""
    parser = argparse.ArgumentParser(prog="python -m tests.toy_aggregation")
    parser.add_argument("spec", type=Path)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--go", type=Path, required=True)
    parser.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    spec = WorkerSpec.read(args.spec)
    method = ToyMethod(spec, args.rank)
    try:
        method.listen()
        print("ready", flush=True)
        deadline = time.monotonic() + spec.connect_timeout_s
        while not args.go.exists():
            if time.monotonic() > deadline:
                print(f"rank {args.rank}: {args.go} did not appear within {spec.connect_timeout_s:g} s", file=sys.stderr)
                return 2
            time.sleep(POLL_S)
        values, _, _ = method.allreduce(np.load(spec.inputs[args.rank]))
        np.save(args.output, values)
    finally:
        method.close()
    return 0


AGGREGATION = Aggregation(
    name=NAME, label="Toy sum", parameters=ToyParameters.from_config, read_parameters=ToyParameters.read, k_choices=(32,),
    defaults={}, sum_bits=32, host="tests.toy_aggregation:ToyMethod", reset_switch="tests.toy_aggregation:reset_switch",
    program_fabric="tests.toy_aggregation:program_fabric", switch_address=False, core="tests.toy_aggregation:core",
)
"""Its frames carry no IP address (``switch_address=False``): no host resolves the switch's."""
METHOD: Method = in_network(AGGREGATION, name=NAME, label="Toy sum", colour="tab:olive", verify=verification.float_sum,
                            bound=lambda link_bps, n_workers, k: link_bps / 32)
"""Its method: int32 sums checked exactly (``float_sum``'s int32 case), bounded by the line rate."""
PROGRAM = "tests.toy_aggregation:ToySwitch"
"""Its program on the embedded target: the registry line (``PROGRAMS``, ``SIMULATED_PROGRAMS``)."""


if __name__ == "__main__":
    sys.exit(main())
