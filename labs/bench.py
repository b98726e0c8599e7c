"""One SwitchMLIngress in the test process, fed update frames, for the labs' switch tests;
and scripted runs of it, of the worker's timers and of a lossy all-reduce on the simulated
clock, for the grade of record.

The behaviour cases of tests/test_switch_behaviour.py send real packets through a switch
process in network namespaces: right for grading, but when the student's code raises, the
switch process dies and the test only sees missing results. These cases call the ingress
control directly, so a student sees the exception (``NotImplementedError: Lab 2: ...``) or
the wrong register value in the failure's first line, and need no root.

``scenario``, ``timers_scenario``, ``round_trip_timeouts``, ``timeout_floor`` and
``lossy_allreduce`` are what an instructor's grade calls (labs 2 and 3's ``calls`` in
lab.yaml, labs/harness.py): each plays a script through the student's code and returns
every effect the tests look at, never a verdict; the grader compares it with what the
reference's code returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from protocol import params
from protocol.switchml import params as switchml_params
from protocol.packet import build_frame, Endpoint
from protocol.switchml.packet import encode_payload, SwitchMLHeader
from switches.embedded.drop_simulator import DropSimulator
from switches.embedded.switchml.ingress import DROP, SwitchMLIngress
from hosts.switchml.timers import RetransmitPolicy, RoundTripEstimator, SlotTimers
from switches.embedded.switchml.parser import SWITCHML_EXPONENT, SWITCHML_MSG_TYPE, PacketBuffer, SwitchMLParser

K = 4
POOL = 8
JOB = 5
MCAST_GRP = 9
SWITCH = Endpoint(params.SWITCH_MAC, params.SWITCH_IPV4, switchml_params.UDP_PORT_BASE)
SPINE = Endpoint("02:00:00:00:01:00", "10.0.1.1", switchml_params.UDP_PORT_BASE)
"""The switch above a leaf (hierarchical aggregation, docs/dataplane.md), on UPLINK_PORT."""
UPLINK_PORT = 16


def worker(rank: int) -> Endpoint:
    return Endpoint(f"02:00:00:00:00:{rank + 1:02x}", f"10.0.0.{rank + 1}", switchml_params.WORKER_UDP_PORT)


def _ipv4(endpoint: Endpoint) -> int:
    return int.from_bytes(bytes(int(part) for part in endpoint.ipv4.split(".")), "big")


def _mac(endpoint: Endpoint) -> int:
    return int(endpoint.mac.replace(":", ""), 16)


@dataclass
class IngressBench:
    """``n`` workers of job JOB on ports 1..n (rank r on port r + 1); with ``leaf``, the
    switch is a leaf whose complete local sums go up to SPINE on UPLINK_PORT."""

    n: int = 2
    leaf: bool = False
    ingress: SwitchMLIngress = field(init=False)
    packet: PacketBuffer = field(init=False)

    def __post_init__(self) -> None:
        self.ingress = SwitchMLIngress(K, POOL, DropSimulator(seed=1))
        self.packet = PacketBuffer(K)
        self._parser = SwitchMLParser(K)
        for rank in range(self.n):
            self.ingress.worker_table.add("set_worker", [rank + 1, _ipv4(worker(rank))], [rank, JOB, self.n, MCAST_GRP, 0, POOL])  # slot_base, pool_size: the whole pool
        if self.leaf:
            uplink = [UPLINK_PORT, _mac(SWITCH), _ipv4(SWITCH), _mac(SPINE), _ipv4(SPINE), self.n, MCAST_GRP, 0, POOL]
            self.ingress.uplink_table.add("set_uplink", [JOB], uplink)

    def send(self, rank: int, slot: int, shadow_set: int, values: list[int], exponent: int = 0, seq: int = 0) -> tuple:
        """Run one update of ``rank`` through the ingress; returns its decision."""
        header = SwitchMLHeader(switchml_params.MSG_UPDATE, shadow_set, JOB, slot, K, exponent, seq)
        frame = build_frame(worker(rank), SWITCH, encode_payload(header, np.asarray(values, dtype=np.int32)))
        self.packet.frame[: len(frame)] = frame
        return self.ingress.apply(self.packet, rank + 1, len(frame), self._parser.parse(self.packet.frame, len(frame)))

    def result_from_above(self, slot: int, shadow_set: int, values: list[int], exponent: int = 0, seq: int = 0) -> tuple:
        """Run the spine's result for a leaf's slot through the ingress; returns its decision."""
        header = SwitchMLHeader(switchml_params.MSG_RESULT, shadow_set, JOB, slot, K, exponent, seq)
        frame = build_frame(SPINE, SWITCH, encode_payload(header, np.asarray(values, dtype=np.int32)))
        self.packet.frame[: len(frame)] = frame
        return self.ingress.apply(self.packet, UPLINK_PORT, len(frame), self._parser.parse(self.packet.frame, len(frame)))

    def result(self) -> tuple[int, int, list[int]]:
        """(msg_type, exponent, elements) of the frame in the buffer, as the ingress left it."""
        header = self._parser.parse(self.packet.frame, len(self.packet.frame))
        return header[SWITCHML_MSG_TYPE], header[SWITCHML_EXPONENT], self.packet.data.tolist()

    def events(self) -> dict[str, int]:
        """The event counter's packet counts by EV_* name (the non-zero ones)."""
        counts = self.ingress.event_counter.packets
        return {name: int(counts[index]) for index, name in enumerate(switchml_params.EVENT_COUNTER_CELLS) if counts[index]}

    def cell(self, register: str, slot: int, shadow_set: int) -> int:
        return getattr(self.ingress, register).cells[shadow_set * POOL + slot]


REGISTERS = ("bitmap", "count", "exponent", "seq")
"""The per-slot registers a scenario reports, with the slot's values."""


def scenario(steps: list[dict], n: int = 2, leaf: bool = False) -> dict:
    """What the ingress does with ``steps`` (each a ``send``'s keyword arguments, ``rank``
    included, or ``{"from_above": {...}}`` with ``result_from_above``'s), on a new bench of
    ``n`` workers: each step's decision and, where it sends a frame, the frame; then every
    register cell of the slots the steps touched and the event counter's packets and bytes.
    An instructor's grade calls it with the submission's ingress (labs/harness.py) and
    compares what it returns with what the reference's gives: every effect the tests look
    at, none of their verdicts."""
    bench = IngressBench(n=n, leaf=leaf)
    decisions = []
    touched = set()
    for step in steps:
        above = step.get("from_above")
        decision = bench.result_from_above(**above) if above is not None else bench.send(**step)
        touched.add(((above or step)["slot"], (above or step)["shadow_set"]))
        decisions.append({"decision": list(decision), "frame": None if decision == DROP else list(bench.result())})
    cells = {f"{slot}/{shadow_set}": {**{name: bench.cell(name, slot, shadow_set) for name in REGISTERS},
                                      "values": bench.ingress.values.rows[shadow_set * POOL + slot].tolist()}
             for slot, shadow_set in sorted(touched)}  # fmt: skip
    counter = bench.ingress.event_counter
    events = {name: [counter.packets[i], counter.bytes[i]] for i, name in enumerate(switchml_params.EVENT_COUNTER_CELLS) if counter.packets[i]}
    return {"steps": decisions, "cells": cells, "events": events}


def timers_scenario(n_slots: int, policy: dict, steps: list[list]) -> list:
    """What a worker's SlotTimers of ``n_slots`` slots and RetransmitPolicy(**``policy``)
    answer to ``steps``, each ``[method, argument, ...]`` of ``arm``, ``answered``,
    ``disarm``, ``pop_expired`` or ``next_deadline`` (a list of slots is a batch); at the
    end, each slot's timeouts and the round trips' median."""
    timers = SlotTimers(n_slots, RetransmitPolicy(**policy))
    answers: list = []
    for method, *args in steps:
        args = [np.asarray(arg) if isinstance(arg, list) else arg for arg in args]
        answer = getattr(timers, method)(*args)
        answers.append([array.tolist() for array in answer] if method == "pop_expired" else answer)
    return [answers, timers.timeouts_per_slot.tolist(), timers.rtt.median]


def round_trip_timeouts(samples: list[list], floor_s: float, first_s: float) -> list:
    """The timeout a RoundTripEstimator gives after each ``[round trip, times]`` of ``samples``."""
    rtt = RoundTripEstimator()
    timeouts = []
    for value, times in samples:
        for _ in range(times):
            rtt.sample(value)
        timeouts.append(rtt.timeout(floor_s, first_s))
    return timeouts


def timeout_floor(k: int, pool_size: int, timeout_ms: float, link_mbps: float | None) -> float:
    """A worker's timeout floor for these protocol settings (hosts/switchml/spec.py)."""
    from hosts.switchml.spec import retransmit_policy
    from protocol.worker_spec import SwitchMLParameters

    return retransmit_policy(SwitchMLParameters(k=k, pool_size=pool_size, job_id=0, timeout_ms=timeout_ms, backoff_every=100), link_mbps).min_s


def lossy_allreduce(workers: int, elements: int, loss: float, seed: int, link_mbps: float = 2.5, delay_ms: float = 0.0,
                    pool_size: int = 64, timeout_ms: float = 20.0, backoff_every: int = 100, results_lost: bool = True) -> dict:  # fmt: skip
    """One SwitchML all-reduce of ``workers`` seeded float32 tensors of ``elements`` on the
    simulated clock (simulation/): a star of links of ``link_mbps`` and ``delay_ms`` that
    each lose ``loss`` of their frames (seeded: the same frames whatever the code), the
    embedded switch's pipeline (the tree's ingress) and the workers' loop with the tree's
    timers, the timeout floor from the tree's ``pool_drain_s`` as in a run (hosts/switchml/spec.py).
    Without ``results_lost``, only updates are lost, by the switch's drop simulator at its
    ingress: with one worker, no update then reaches a slot twice unless the worker's timer
    fired before its result was due, so the switch's retransmission branch (lab 3's, which
    the P4 track writes in P4 only) is never needed when the timers are right.

    Returns, per worker, whether its sum is the exact one, its packets sent, timeouts,
    retransmissions, duplicates and TAT in simulated seconds; and the switch's event
    counts. Every resend a worker's timers choose, and every answer the switch gives it,
    moves these numbers: an instructor's grade compares them with the reference's, so a
    submission is credited only if its switch and timers recover each loss as the
    reference's do (the exact sums alone can be computed without recovering any)."""
    from hosts.switchml.spec import retransmit_policy
    from methods.verification import expected_for, integer_sum
    from protocol.worker_spec import SwitchMLParameters
    from simulation.network import JobSetup, SimulatedNetwork
    from simulation.switchml.worker import WorkerSetup, workers as switchml_workers
    from switches.switchml import programming
    from switches.targets import REGISTRY
    from topologies.model import TOPOLOGY_DIR, load_topology

    k = 32
    link = {"bw_mbps": link_mbps, "delay_ms": delay_ms, "loss": loss if results_lost else 0.0, "queue_packets": 200}
    topology = load_topology(TOPOLOGY_DIR / "star.yaml", {"workers": workers, "link": link})
    protocol = SwitchMLParameters(k=k, pool_size=pool_size, job_id=1, timeout_ms=timeout_ms, backoff_every=backoff_every)
    policy = retransmit_policy(protocol, link_mbps)
    job = JobSetup(k, pool_size, switchml_params.MAX_POOL_SIZE, 1,
                   switchml_workers(lambda rank: WorkerSetup(rank, workers, 1, k, pool_size, policy, 60.0)))
    network = SimulatedNetwork(topology, REGISTRY["embedded"], job, "auto", seed=seed)  # on SimPy: the tree's timers, not C's
    network.reset_aggregation()
    if not results_lost:
        programming.set_drop_probability(network.controls["s1"], loss, 0.0)
    rng = np.random.default_rng(seed)
    tensors = [rng.standard_normal(elements).astype(np.float32) for _ in range(workers)]
    expected = expected_for(tensors, k)
    results = network.allreduce(tensors)
    return {
        "workers": [{"exact": integer_sum(expected, r.values, r.int_sum).verified, "packets_sent": r.stats.packets_sent,
                     "timeouts": r.stats.timeouts, "retransmissions": r.stats.retransmissions,
                     "duplicates": r.stats.duplicates, "tat_s": r.stats.tat_s} for r in results],
        "switch": network.event_counters(),
    }  # fmt: skip
