"""One packet through the whole program: parser -> ingress -> traffic manager -> egress -> out.

This is the v1model pipeline of docs/dataplane.md, minus I/O: the switch loop receives a
frame into ``packet`` and calls ``process``; frames leave through the per-port transmit
functions in ``ports``. Keeping sockets out of here lets the control plane, the tests and a
profiler drive the exact same code. SwitchMLComputeChecksum runs once per forwarded
packet, before replication, since egress never changes an ordinary packet's bytes.
"""

from __future__ import annotations

import logging

from switches.embedded.checksum import compute_checksum
from switches.embedded.drop_simulator import DropSimulator
from switches.embedded.switchml.egress import SwitchMLEgress
from switches.embedded.switchml.ingress import RESULT_TO_GROUP, RESULT_TO_PORT, TO_PORT, UPDATE_TO_PORT, SwitchMLIngress
from switches.embedded.parser import ADDRESS_HEADERS_BYTES
from switches.embedded.switchml.parser import PacketBuffer, SwitchMLParser
from switches.embedded.program import ProgramView
from switches.embedded.registers import Register
from switches.embedded.traffic_manager import TrafficManager
from switches.target import Transmit

log = logging.getLogger(__name__)


class SwitchMLPipeline(ProgramView):
    """The switch's program and state; ``ports`` maps a port number to its transmit function."""

    def __init__(self, k: int, max_pool_size: int, seed: int | None = None) -> None:
        drop_simulator = DropSimulator(seed)
        self.packet = PacketBuffer(k)
        self.frame = self.packet.frame
        """What the switch process receives each frame into (program.py's ``PortProgram``)."""
        self.parser = SwitchMLParser(k)
        self.ingress = SwitchMLIngress(k, max_pool_size, drop_simulator)
        self.traffic_manager = TrafficManager()
        self.egress = SwitchMLEgress(drop_simulator)
        self.ports: dict[int, Transmit] = {}
        self.tx_errors = 0
        """Frames the kernel refused to send (full queue, too large): lost like on a wire."""
        self._tables = {t.name: t for t in (*self.ingress.tables(), self.egress.rank_addr_table)}
        self._registers: dict[str, Register] = {r.name: r for r in (*self.ingress.registers(), *self.egress.registers())}
        self._counters = {c.name: c for c in (self.ingress.event_counter, self.egress.egress_counter)}

    # -- the data path ------------------------------------------------------------------

    def process(self, in_port: int, length: int) -> None:
        """Run the frame in ``packet.frame[:length]``, received on ``in_port``, to its ports."""
        packet = self.packet
        decision = self.ingress.apply(packet, in_port, length, self.parser.parse(packet.frame, length))
        if not decision:
            return
        kind = decision[0]
        if kind == RESULT_TO_GROUP:
            update_headers = bytes(packet.view[:ADDRESS_HEADERS_BYTES])
            emit_result = self._emit_result
            job_id = decision[2]
            for rid, port in self.traffic_manager.replicas(decision[1]):
                emit_result(update_headers, job_id, rid, port)
        elif kind == RESULT_TO_PORT:
            self._emit_result(bytes(packet.view[:ADDRESS_HEADERS_BYTES]), decision[3], decision[2], decision[1])
        elif kind == UPDATE_TO_PORT:  # a partial sum to the switch above: exactly an update's bytes
            frame = packet.result_view
            compute_checksum(packet.frame, len(frame))
            self._emit(decision[1], frame)
        elif kind == TO_PORT:
            compute_checksum(packet.frame, length)
            self._emit(decision[1], packet.view[:length])
        else:  # TO_GROUP: flood, never back out of the ingress port
            compute_checksum(packet.frame, length)
            frame = packet.view[:length]
            for _rid, port in self.traffic_manager.replicas(decision[1]):
                if port != in_port:
                    self._emit(port, frame)

    def _emit_result(self, update_headers: bytes, job_id: int, rank: int, port: int) -> None:
        headers = self.egress.result_headers(update_headers, job_id, rank)
        if headers is None:  # rank_addr_table miss -> drop
            return
        packet = self.packet
        packet.frame[:ADDRESS_HEADERS_BYTES] = headers
        self._emit(port, packet.result_view)

    def _emit(self, port: int, frame: memoryview) -> None:
        if not self.egress.admit(len(frame)):
            return
        transmit = self.ports.get(port)
        if transmit is None:
            return
        try:
            transmit(frame)
        except OSError as exc:
            self.tx_errors += 1
            log.debug("port %d: send failed: %s", port, exc)
