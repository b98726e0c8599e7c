"""A simulated star on star.c's event loop: the state it hands over and takes back.

``NativeStar`` runs a ``SimulatedNetwork``'s all-reduces in C when the network is a star
whose switch is the embedded pipeline, running one job of every host, with loss (if any)
on the links and ideal hosts (``star_problem`` names what else it is not); ``star_of``
hands it a network. The Python
objects stay the network's state: before a run the links' queues and random generators,
the pipeline's registers, counters and tables are read into star.c's structs; after it
they are written back, so the control plane, the results and a later run see what SimPy
would have left. Frames in flight and frames waiting in a worker's receive queue stay in
star.c's ``struct sim`` between runs, as they would stay in SimPy's queue.
"""

from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from hosts.switchml.core import AllReduceResult, SwitchMLTimeout
from hosts.switchml.native import NativeUnavailable
from protocol.switchml.packet import frame_bytes, SWITCHML_OFFSET
from simulation.link import Link
from simulation.switchml.worker import SimulatedWorker
from switches.target import SimulatedSwitch

if TYPE_CHECKING:
    from simulation.network import LoopShape, SimulatedNetwork

_p, _i32, _i64, _f64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64, ctypes.c_double
TO_SWITCH, TO_WORKER, TO_NOBODY = range(3)
SIM_DONE, SIM_NO_MEMORY, SIM_OFF_PATH = range(3)
TRACE_SENT, TRACE_QUEUE_DROP, TRACE_LOST = range(3)
"""What became of a traced frame (``LinkTrace``)."""
MT_WORDS = 624


class _Link(ctypes.Structure):
    """struct sim_link."""

    _fields_ = [*[(name, _f64) for name in ("seconds_per_byte", "delay_s", "burst", "tokens", "free_at", "loss")],
                *[(name, _i32) for name in ("queue_packets", "to_kind", "to_index", "dep_head", "dep_count", "mt_index")],
                ("departures", _p), ("mt", _p),
                *[(name, _i64) for name in ("frames", "bytes", "queue_drops", "lost")],
                ("trace_time", _p), ("trace_frames", _p), ("trace_outcome", _p), ("trace_len", _i64), ("trace_capacity", _i64)]  # fmt: skip


class _Switch(ctypes.Structure):
    """struct sim_switch."""

    _fields_ = [*[(name, _i32) for name in ("k", "max_pool_size", "frame_bytes", "n_ports")],
                *[(name, _p) for name in ("values", "bitmap", "count", "seq", "exponent", "event_packets", "event_bytes",
                                          "egress_packets", "egress_bytes", "out_link", "set_worker", "rank", "job_id",
                                          "num_workers", "mcast_grp", "slot_base", "pool_size", "in_headers")],
                ("n_replicas", _i32), ("replica_rid", _p), ("replica_port", _p),
                ("max_rank", _i32), ("result_headers", _p), ("result_ok", _p)]  # fmt: skip


def declare_star(lib: ctypes.CDLL) -> None:
    """star.c's signatures, and the struct layouts checked against the compiler's."""
    lib.sim_create.restype = _p
    lib.sim_create.argtypes = [_i32, _i32]
    lib.sim_destroy.argtypes = [_p]
    lib.sim_destroy.restype = None
    lib.sim_now.argtypes = [_p]
    lib.sim_now.restype = _f64
    lib.sim_worker_status.argtypes = [_p, _i32]
    lib.sim_worker_status.restype = _i32
    lib.sim_worker_end.argtypes = [_p, _i32]
    lib.sim_worker_end.restype = _f64
    lib.sim_run.argtypes = [_p, ctypes.POINTER(_Link), ctypes.POINTER(_Switch), ctypes.POINTER(_p), _p, _p]
    lib.sim_run.restype = ctypes.c_int
    lib.sim_link_size.restype = lib.sim_switch_size.restype = _i64
    lib.sim_address_bytes.restype = _i32
    for struct, size in ((_Link, lib.sim_link_size()), (_Switch, lib.sim_switch_size())):
        if ctypes.sizeof(struct) != size:
            raise NativeUnavailable(f"struct {struct.__name__} is {size} bytes in star.c and {ctypes.sizeof(struct)} in Python")
    if lib.sim_address_bytes() != SWITCHML_OFFSET:
        raise NativeUnavailable(f"star.c rewrites {lib.sim_address_bytes()} bytes of headers, the protocol has {SWITCHML_OFFSET}")


def has_aggregation_path(switch: object) -> bool:
    """Whether a simulated switch hands star.c its aggregation path (the embedded pipeline's
    ``aggregation_path`` and ``take_back``)."""
    return callable(getattr(switch, "aggregation_path", None)) and callable(getattr(switch, "take_back", None))


def star_problem(shape: LoopShape, switch: SimulatedSwitch) -> str | None:
    """Why star.c cannot run a network of ``shape`` whose switches are like ``switch`` (None: it can)."""
    problems = [(shape.switches != 1, f"{shape.switches} switches"),
                (not has_aggregation_path(switch), "a switch with no aggregation path for star.c"),
                (shape.shared_jobs > 0, "several jobs on one switch"), (shape.hosts_in_job != shape.hosts, "hosts that run no worker"),
                (shape.drop_simulator, "loss by the switches' drop simulator"), (shape.packet_cost_s > 0, "a host cost per packet")]
    found = [what for wrong, what in problems if wrong]
    return ", ".join(found) or None


@dataclass
class LinkTrace:
    """Every frame a link was handed, in order: (simulated time, frame bytes, TRACE_*)."""

    capacity: int
    frame_bytes: int
    frames: list[tuple[float, bytes, int]] = field(default_factory=list)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return np.zeros(self.capacity), np.zeros((self.capacity, self.frame_bytes), dtype=np.uint8), np.zeros(self.capacity, dtype=np.int8)


def _address(array: np.ndarray) -> int:
    return array.ctypes.data


class NativeStar:
    """``workers`` (in host order, each on its own port of ``switch``) all-reducing on star.c's
    loop; ``links`` every link direction, ``destinations`` where each delivers: (TO_SWITCH,
    port), (TO_WORKER, index) or (TO_NOBODY, 0)."""

    def __init__(self, switch: SimulatedSwitch, ports: dict[int, int], links: Sequence[Link], destinations: Sequence[tuple[int, int]],
                 workers: Sequence[SimulatedWorker], uplinks: Sequence[int], k: int) -> None:
        from simulation.switchml.native import library

        self._lib = library()
        self._switch = switch
        self._worker_ports = [destinations[uplink][1] for uplink in uplinks]
        """The switch port of each worker."""
        self._links = list(links)
        self._destinations = list(destinations)
        self._workers = list(workers)
        self._port_links = ports
        """switch port -> index of the link it transmits on."""
        self._uplinks = np.array(uplinks, dtype=np.int32)
        self._headers = np.frombuffer(b"".join(w.header for w in workers), dtype=np.uint8).copy()
        self._k = k
        sim = self._lib.sim_create(len(workers), frame_bytes(k))
        if not sim:
            raise MemoryError("star.c: no memory for the simulation's state")
        self._sim = ctypes.c_void_p(sim)
        self._finalizer = weakref.finalize(self, self._lib.sim_destroy, self._sim)
        self.traces: list[LinkTrace] | None = None
        """One per link (in ``links``' order) to record what each is handed; None: not recorded."""

    @property
    def now(self) -> float:
        return self._lib.sim_now(self._sim)

    def allreduce(self, tensors: Sequence[np.ndarray]) -> list[AllReduceResult | SwitchMLTimeout]:
        """Every worker's all-reduce of its tensor, released at the simulated now; each one's
        result or timeout, as ``SimulatedWorker.allreduce`` returns them."""
        now = self.now
        prepared = [worker.native_allreduce(tensor, now) for worker, tensor in zip(self._workers, tensors)]
        jobs = (ctypes.c_void_p * len(prepared))(*[ctypes.addressof(p.job) for p in prepared])
        links, keep_links = self._export_links()
        switch, keep_switch = self._export_switch()
        try:
            try:
                status = self._lib.sim_run(self._sim, links, ctypes.byref(switch), jobs, _address(self._uplinks), _address(self._headers))
            finally:
                self._import_links(links, keep_links)
                self._import_switch(keep_switch)
            if status == SIM_NO_MEMORY:
                raise MemoryError("star.c ran out of memory")
            if status == SIM_OFF_PATH:
                raise RuntimeError("star.c: the switch received a frame its path does not take (not from a worker of the star)")
            return [worker.native_result(job, self._lib.sim_worker_status(self._sim, index), self._lib.sim_worker_end(self._sim, index))
                    for index, (worker, job) in enumerate(zip(self._workers, prepared))]
        finally:
            for job in prepared:  # the send timelines worker.c allocated
                self._lib.sml_release(ctypes.byref(job.job))

    # -- the links ------------------------------------------------------------------------

    def _export_links(self) -> tuple[ctypes.Array, list[tuple[np.ndarray, np.ndarray]]]:
        links = (_Link * len(self._links))()
        keep = []
        traces = self.traces or [None] * len(self._links)
        for c, link, (kind, index), traced in zip(links, self._links, self._destinations, traces):
            seconds_per_byte, delay_s, queue_packets, loss, burst = link.model
            free_at, tokens, departures = link.queue
            ring = np.zeros(queue_packets)
            ring[: len(departures)] = departures
            version, state, gauss = link.rng.getstate()
            mt = np.array(state[:MT_WORDS], dtype=np.uint32)
            recorded = traced.arrays() if traced is not None else None
            if recorded is not None:
                c.trace_time, c.trace_frames, c.trace_outcome = (_address(a) for a in recorded)
                c.trace_capacity = traced.capacity
            keep.append((ring, mt, version, gauss, traced, recorded))
            c.seconds_per_byte, c.delay_s, c.burst, c.tokens, c.free_at, c.loss = seconds_per_byte, delay_s, burst, tokens, free_at, loss
            c.queue_packets, c.to_kind, c.to_index, c.dep_head, c.dep_count = queue_packets, kind, index, 0, len(departures)
            c.mt_index, c.departures, c.mt = state[MT_WORDS], _address(ring), _address(mt)
            c.frames, c.bytes, c.queue_drops, c.lost = link.frames, link.bytes, link.queue_drops, link.lost
        return links, keep

    @staticmethod
    def _ring(c: _Link, ring: np.ndarray) -> list[float]:
        return [float(ring[(c.dep_head + i) % c.queue_packets]) for i in range(c.dep_count)]

    def _import_links(self, links: ctypes.Array, keep: list) -> None:
        for c, link, (ring, mt, version, gauss, traced, recorded) in zip(links, self._links, keep):
            if traced is not None:
                times, frames, outcomes = recorded
                traced.frames += [(float(times[i]), frames[i].tobytes(), int(outcomes[i])) for i in range(c.trace_len)]
            link.set_queue(c.free_at, c.tokens, self._ring(c, ring))
            link.rng.setstate((version, (*mt.tolist(), c.mt_index), gauss))
            link.frames, link.bytes, link.queue_drops, link.lost = c.frames, c.bytes, c.queue_drops, c.lost

    # -- the switch -----------------------------------------------------------------------

    def _export_switch(self) -> tuple[_Switch, dict[str, np.ndarray]]:
        """The switch's aggregation path (``PipelineSwitch.aggregation_path``) as struct sim_switch."""
        arrays = self._switch.aggregation_path({port: worker.header for port, worker in zip(self._worker_ports, self._workers)})
        n_ports = len(arrays["rank"]) - 1
        if max(self._port_links) > n_ports:
            raise RuntimeError(f"star.c runs a star: port {max(self._port_links)} of the switch has no worker")
        out_link = np.full(n_ports + 1, -1, dtype=np.int32)
        for port, link in self._port_links.items():
            out_link[port] = link
        arrays["out_link"] = out_link
        scalars = {name: int(arrays.pop(name)) for name in ("k", "max_pool_size", "frame_bytes", "n_replicas", "max_rank")}
        if scalars["k"] != self._k or scalars["frame_bytes"] != frame_bytes(self._k):
            raise RuntimeError(f"the switch aggregates k = {scalars['k']}, its workers send k = {self._k}")
        switch = _Switch(n_ports=n_ports, **scalars, **{name: _address(array) for name, array in arrays.items()})
        return switch, arrays

    def _import_switch(self, arrays: dict[str, np.ndarray]) -> None:
        self._switch.take_back(arrays)


def star_of(network: SimulatedNetwork) -> NativeStar:
    """``network`` (a star ``star_problem`` takes, its workers attached) on star.c's loop: each
    link direction delivering to the switch's port, a worker or nobody."""
    [(name, switch)] = network.switches.items()
    order = list(network.links)
    index = {pair: i for i, pair in enumerate(order)}
    hosts = {host.name: i for i, host in enumerate(network.topology.hosts)}
    destinations = [(TO_SWITCH, network.ports[b][a]) if b == name else (TO_WORKER, hosts[b]) if hosts.get(b) in network.workers
                    else (TO_NOBODY, 0) for a, b in order]
    workers = [network.workers[i] for i in range(len(network.topology.hosts))]
    uplinks = [index[host.name, name] for host in network.topology.hosts]
    ports = {port: index[name, neighbour] for neighbour, port in network.ports[name].items()}
    return NativeStar(switch, ports, [network.links[pair] for pair in order], destinations, workers, uplinks, network.k)
