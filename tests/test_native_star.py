"""The native simulator (simulation/switchml/native/star.c: worker.c's core and the embedded
pipeline's aggregation path on a C event loop) against the Python one (core.py and the
pipeline on SimPy): on the same star, lossless and lossy, every link must be handed the
same frames at the same simulated times with the same fates, and every worker must end
with the same TAT, statistics and sums, the switch with the same registers and counters.
Two all-reduces run back to back, so frames still in flight when the first ends (a
retransmission's late result) reach the second, on both.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hosts.switchml.core import SwitchMLTimeout
from hosts.switchml.native import NativeUnavailable
from hosts.switchml.timers import RetransmitPolicy, pool_drain_s
from network.shaping import HTB_CBURST_BYTES
from protocol.params import mbps_to_bps
from simulation.link import Link
from simulation.switchml.native.star import TRACE_LOST, TRACE_QUEUE_DROP, TRACE_SENT, LinkTrace
from simulation.network import NATIVE_CORE, PYTHON_CORE, JobSetup, SimulatedNetwork, SimulationUnsupported
from simulation.switchml.native import STAR
from simulation.switchml.worker import WorkerSetup, workers as switchml_workers
from protocol.switchml.packet import frame_bytes
from switches.targets import REGISTRY
from topologies.model import TOPOLOGY_DIR, load_topology

K, POOL = 256, 16
SIMULATED = next(t for t in REGISTRY.values() if t.simulated is not None)


def native_available() -> bool:
    from simulation.switchml.native import library

    try:
        library()
    except NativeUnavailable:
        return False
    return True


pytestmark = [pytest.mark.skipif(not native_available(), reason="no C compiler builds simulation/switchml/native/star.c here"),
              pytest.mark.parallel_safe]


def network(core: str, workers: int, mbps: float, loss: float = 0.0, queue: int = 200, topology: str = "star.yaml",
            loss_mechanism: str = "auto", cost_s: float = 0.0, deadline_s: float = 10.0, burst_bytes: float = 0.0,
            **keys: object) -> SimulatedNetwork:
    link = {"bw_mbps": mbps, "delay_ms": 0.001, "loss": loss, "queue_packets": queue}
    topo = load_topology(TOPOLOGY_DIR / topology, {"workers": workers, "link": link, **keys})
    floor = max(2e-4, 2 * pool_drain_s(POOL, K, mbps_to_bps(mbps)))
    policy = RetransmitPolicy(min_s=floor, max_s=max(0.01, floor), first_s=floor)
    job = JobSetup(K, POOL, 512, 1, switchml_workers(lambda rank: WorkerSetup(rank, workers, 1, K, POOL, policy, deadline_s, cost_s)))
    net = SimulatedNetwork(topo, SIMULATED, job, loss_mechanism, seed=11, link_burst_bytes=burst_bytes,
                           native=STAR if core == NATIVE_CORE else None)
    net.reset_aggregation()
    return net


def trace_python(monkeypatch: pytest.MonkeyPatch) -> dict[int, list[tuple[float, bytes, int]]]:
    """Record what every Python Link is handed (before the network is built: the switch binds ``send``)."""
    records: dict[int, list[tuple[float, bytes, int]]] = {}
    send = Link.send

    def traced(link: Link, frame: bytes) -> None:
        drops, lost = link.queue_drops, link.lost
        send(link, frame)
        fate = TRACE_QUEUE_DROP if link.queue_drops != drops else TRACE_LOST if link.lost != lost else TRACE_SENT
        records.setdefault(id(link), []).append((link._env.now, bytes(frame), fate))

    monkeypatch.setattr(Link, "send", traced)
    return records


def inputs(workers: int, elements: int, dtype: str, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    if dtype == "int32":
        return [rng.integers(-1000, 1000, elements, dtype=np.int32) for _ in range(workers)]
    return [rng.standard_normal(elements).astype(np.float32) for _ in range(workers)]


def switch_state(net: SimulatedNetwork) -> tuple:
    [switch] = net.switches.values()
    ingress, egress = switch.pipeline.ingress, switch.pipeline.egress
    return (ingress.values.matrix.tobytes(), ingress.bitmap.cells, ingress.count.cells, ingress.seq.cells, ingress.exponent.cells,
            ingress.event_counter.packets, ingress.event_counter.bytes, egress.egress_counter.packets, egress.egress_counter.bytes)


@pytest.mark.parametrize(("workers", "loss", "dtype", "queue", "burst"), [(4, 0.0, "int32", 200, 0.0), (8, 0.02, "float32", 200, 0.0),
                                                                           (6, 0.05, "int32", 200, 0.0), (8, 0.0, "float32", 8, 0.0),
                                                                           (4, 0.02, "int32", 200, HTB_CBURST_BYTES)])
def test_both_cores_hand_every_link_the_same_frames_and_end_alike(workers: int, loss: float, dtype: str, queue: int, burst: float,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The last case gives the links the emulator's htb bucket (simulation/link.py)."""
    python_records = trace_python(monkeypatch)
    python = network(PYTHON_CORE, workers, 100_000.0, loss, queue, burst_bytes=burst)
    native = network(NATIVE_CORE, workers, 100_000.0, loss, queue, burst_bytes=burst)
    assert native.core == NATIVE_CORE and python.core == PYTHON_CORE
    native._native.traces = [LinkTrace(200_000, frame_bytes(K)) for _ in native.links]
    for seed in (1, 2):
        tensors = inputs(workers, 20_000 + 777 * seed, dtype, seed)
        ours, theirs = native.allreduce(tensors), python.allreduce(tensors)
        for a, b in zip(ours, theirs):
            assert dataclasses.asdict(a.stats) == dataclasses.asdict(b.stats)
            assert np.array_equal(a.int_sum, b.int_sum) and np.array_equal(a.values, b.values)
            assert (a.exponents is None) == (b.exponents is None)
            if a.exponents is not None:
                assert np.array_equal(a.exponents, b.exponents)
        assert native.now == python.now
    assert switch_state(native) == switch_state(python)
    fates = set()
    for pair, link in python.links.items():
        mine = native._native.traces[list(native.links).index(pair)].frames
        assert mine == python_records.get(id(link), []), f"link {pair}"
        assert (native.links[pair].frames, native.links[pair].lost, native.links[pair].queue_drops) == (link.frames, link.lost, link.queue_drops)
        assert native.links[pair].queue == link.queue
        assert native.links[pair].rng.getstate() == link.rng.getstate()
        fates |= {fate for _, _, fate in mine}
    if loss:
        assert TRACE_LOST in fates, "the lossy case lost no frame: it tests nothing of loss"
        assert sum(r.stats.retransmissions for r in ours) > 0
    if queue < POOL:
        assert TRACE_QUEUE_DROP in fates, "the short queue dropped nothing"


def test_a_missed_deadline_is_the_same_timeout_on_both() -> None:
    """Nearly every frame lost: each worker reports the same slots at the same simulated time."""
    outcomes = []
    for core in (PYTHON_CORE, NATIVE_CORE):
        net = network(core, 4, 100_000.0, loss=0.9, deadline_s=0.003)
        with pytest.raises(SwitchMLTimeout) as raised:
            net.allreduce(inputs(4, 4096, "int32", 1))
        outcomes.append((type(raised.value), raised.value.args, net.now))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize(("keys", "problem"), [({"loss_mechanism": "switch", "loss": 0.01}, "drop simulator"),
                                               ({"cost_s": 1e-6}, "host cost per packet"),
                                               ({"topology": "tree.yaml", "leaves": 2}, "switches")])
def test_the_native_core_refuses_what_its_loop_does_not_run(keys: dict, problem: str) -> None:
    with pytest.raises(SimulationUnsupported, match=problem):
        network(NATIVE_CORE, 4, 100_000.0, **keys)
