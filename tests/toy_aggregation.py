"""Toy sum: the smallest in-network aggregation protocol, all its layers in this one file.

tests/test_plugins.py registers it in temporary copies of the registries, to show that a
protocol is its own files plus registry lines: its typed job parameters, its record
(methods/aggregation.py), its worker (the host side: its own, not the ring's or SwitchML's,
sans-IO, so that it is also the core the simulated clock's generic driver runs), its program
on the embedded target (a ``SimulatedSwitch`` built from the embedded switch's registers,
traffic manager and control plane) and how a network's switches are programmed for it.

The wire format: an Ethernet frame of EtherType 0x88B5 (IEEE's local experimental), then
job id (16 bits), rank (8), workers (8), chunk (32), then k big-endian int32 values. The
switch adds each chunk's values into the slot ``chunk % pool_size`` and, once every worker's
arrived, multicasts the sum to the job's group and frees the slot. Unlike SwitchML it has no
shadow copies, no retransmission and no duplicate detection: the test's links lose nothing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from hosts.stats import JobStats
from methods import verification
from methods.aggregation import Aggregation
from methods.method import Method, in_network
from protocol.worker_spec import WorkerSpec
from switches.control import SwitchControl
from switches.fabric import Fabric, Jobs
from switches.embedded.control_server import pipeline_handlers
from switches.embedded.program import ProgramView
from switches.embedded.registers import CellRegister, Counter
from switches.embedded.traffic_manager import TrafficManager
from switches.remote_control import InProcessControl
from switches.target import Transmit

NAME = "toysum"
ETHERTYPE = 0x88B5
ETHERNET = struct.Struct("!6s6sH")
HEADER = struct.Struct("!HBBI")
BROADCAST = b"\xff" * 6
GROUP = 1
"""The multicast group results go to: every worker's port."""


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


def parse(data: bytes, k: int) -> tuple[int, int, int, int, np.ndarray] | None:
    """(job, rank, workers, chunk, values), or None for a frame not the toy's or the wrong size."""
    offset = ETHERNET.size + HEADER.size
    if len(data) != offset + 4 * k or ETHERNET.unpack_from(data)[2] != ETHERTYPE:
        return None
    return (*HEADER.unpack_from(data, ETHERNET.size), np.frombuffer(data, ">i4", k, offset).astype(np.int32))


class ToyWorker:
    """One rank of a toy-sum job (its record's ``host``: built as ``cls(spec, rank)`` by
    hosts/allreduce.py's ``build``); sans-IO: the frames to send, then the results received."""

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


class ToySwitch(ProgramView):
    """Toy sum's program on the embedded target: its registers and the embedded switch's
    traffic manager and control plane, as a ``SimulatedSwitch``."""

    def __init__(self, *, k: int, max_pool_size: int, seed: int | None = None) -> None:
        self.k, self.pool = k, max_pool_size
        self.traffic_manager = TrafficManager()
        self.ports: dict[int, Transmit] = {}
        self._tables = {}
        self._registers = {r.name: r for r in (CellRegister("ToyIngress.sum", max_pool_size * k),
                                               CellRegister("ToyIngress.count", max_pool_size))}
        self._counters = {"ToyIngress.packets": Counter("ToyIngress.packets", 1)}

    def connect(self, port: int, transmit: Transmit) -> None:
        self.ports[port] = transmit

    def receive(self, port: int, data: bytes) -> None:
        parsed = parse(data, self.k)
        if parsed is None:
            return
        self.counter("ToyIngress.packets").count(0, len(data))
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
            for _rid, out in self.traffic_manager.replicas(GROUP):
                self.ports[out](frame(job, 0, n_workers, chunk, total))

    def stats(self) -> dict:
        return {"rx_drops": {str(port): 0 for port in self.ports}, "tx_errors": 0}

    def control(self, command_log: Path | None = None) -> SwitchControl:
        return InProcessControl(pipeline_handlers(self, self.stats), command_log)


def core(spec: WorkerSpec, rank: int, host: Any, switch: Any) -> ToyWorker:
    """Its record's ``core``: its worker, which needs no address (its frames are broadcast)."""
    return ToyWorker(spec, rank)


def reset_switch(control: SwitchControl, parameters: ToyParameters) -> None:
    """Its record's ``reset_switch``: every slot's sum and count to zero."""
    control.registers_reset(["ToyIngress.sum", "ToyIngress.count"])


def program_switch(control: SwitchControl, ports: list[int]) -> None:
    """Results to every worker's port: one multicast group, one node with all of them."""
    control.mc_mgrp_create(GROUP)
    control.mc_node_associate(GROUP, control.mc_node_create(0, ports))


def program_fabric(controls: Mapping[str, SwitchControl], fabric: Fabric, jobs: Jobs) -> None:
    """Its record's ``program_fabric``: a star's switch multicasts the sums to every host's port."""
    switch = fabric.aggregator.name
    program_switch(controls[switch], [fabric.towards[switch, host.name] for host in fabric.hosts])


AGGREGATION = Aggregation(
    name=NAME, label="Toy sum", parameters=ToyParameters.from_config, read_parameters=ToyParameters.read, k_choices=(32,),
    defaults={}, sum_bits=32, host="tests.toy_aggregation:ToyWorker", reset_switch="tests.toy_aggregation:reset_switch",
    program_fabric="tests.toy_aggregation:program_fabric", core="tests.toy_aggregation:core",
)
METHOD: Method = in_network(AGGREGATION, name=NAME, label="Toy sum", colour="tab:olive", verify=verification.float_sum,
                            bound=lambda link_bps, n_workers, k: link_bps / 32)
"""Its method: int32 sums checked exactly (``float_sum``'s int32 case), bounded by the line rate."""
