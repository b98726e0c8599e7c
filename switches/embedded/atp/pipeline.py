"""One frame through ATP's program: ATPParser -> ATPIngress -> traffic manager -> ATPEgress.

Sans-IO: ``process`` takes a frame and its ingress port and returns the (port, frame) copies
that leave, in order, so tests, a simulated clock and (later) the switch's port loop drive
the same code. The traffic manager, tables and registers are the embedded switch's, which
every protocol's program shares (one folder up).
"""

from __future__ import annotations

from switches.embedded.atp.egress import ATPEgress, QueueDepth, no_queue
from switches.embedded.atp.ingress import RESULT_TO_GROUP, TO_GROUP, TO_PORT, ATPIngress
from switches.embedded.atp.parser import ATPParser
from switches.embedded.drop_simulator import DropSimulator
from switches.embedded.program import ProgramView
from switches.embedded.registers import Register
from switches.embedded.traffic_manager import TrafficManager


class ATPPipeline(ProgramView):
    """ATP's switch program and state, for ``k`` values per packet and ``pool_size`` aggregators;
    ``seed`` makes the drop simulator's draws repeatable (as SwitchMLPipeline's)."""

    def __init__(self, k: int, pool_size: int, queue_depth: QueueDepth = no_queue, seed: int | None = None) -> None:
        drop_simulator = DropSimulator(seed)
        self.parser = ATPParser(k)
        self.ingress = ATPIngress(k, pool_size, drop_simulator)
        self.traffic_manager = TrafficManager()
        self.egress = ATPEgress(drop_simulator, queue_depth)
        self._tables = {t.name: t for t in (*self.ingress.tables(), self.egress.worker_addr_table)}
        self._registers: dict[str, Register] = {r.name: r for r in (*self.ingress.registers(), *self.egress.registers())}
        self._counters = {c.name: c for c in (self.ingress.event_counter, self.egress.egress_counter)}

    def process(self, in_port: int, frame: bytes) -> list[tuple[int, bytes]]:
        """The copies of ``frame``, received on ``in_port``, that leave, as (port, bytes)."""
        packet = bytearray(frame)
        hdr = self.parser.parse(packet)
        decision = self.ingress.apply(packet, in_port, hdr)
        if not decision:
            return []
        kind, egress = decision[0], self.egress
        if kind == TO_PORT:
            return [] if egress.drops(len(packet)) else [(decision[1], bytes(egress.apply(packet, decision[1], hdr is not None)))]
        if kind == TO_GROUP:  # flood, never back out of the ingress port
            return [(port, bytes(egress.apply(bytearray(packet), port, False)))
                    for _rid, port in self.traffic_manager.replicas(decision[1]) if port != in_port and not egress.drops(len(packet))]
        assert kind == RESULT_TO_GROUP
        out = []
        for rid, port in self.traffic_manager.replicas(decision[1]):
            if egress.drops(len(packet)):
                continue
            copy = egress.address_result(packet, decision[2], rid)
            if copy is not None:
                out.append((port, bytes(egress.apply(copy, port, True))))
        return out
