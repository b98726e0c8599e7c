"""ATPEgress: each worker's copy of a result addressed to it, the drop simulator, ECN marking,
the egress counter.

ECN comes from a queue the caller really has: ``queue_depth(port)`` is the depth of the
egress queue the copy joins (the simulated switch's queue, bmv2's deq_qdepth, a phantom
queue where the switch sees none); at or above ``ecn_threshold`` an ATP packet leaves with
the ATP ECN flag and IPv4 ECN = CE (11), as the authors' egress marks it.
"""

from __future__ import annotations

from typing import Callable

from protocol.atp import params
from protocol.atp.packet import ATP_OFFSET, FIELD_OFFSETS
from protocol.packet import IPV4_OFFSET
from switches.embedded.checksum import compute_checksum
from switches.embedded.drop_simulator import DropSimulator
from switches.embedded.parser import result_address_headers
from switches.embedded.registers import CellRegister, Counter
from switches.embedded.tables import ExactMatchTable, Field

NAME = "ATPEgress"
EGV_SENT = params.EGRESS_EVENT["EGV_SENT"]
EGV_ECN_MARKED = params.EGRESS_EVENT["EGV_ECN_MARKED"]
EGV_DROP_SIM_EGRESS = params.EGRESS_EVENT["EGV_DROP_SIM_EGRESS"]
FLAGS_OFFSET = ATP_OFFSET + FIELD_OFFSETS["flags"]
IPV4_TOS_OFFSET = IPV4_OFFSET + 1
IPV4_ECN_CE = 0b11
QueueDepth = Callable[[int], int]
"""Packets queued at an egress port when a copy joins it."""


def no_queue(port: int) -> int:
    """The queue of a switch that reports none: never marks."""
    return 0


class ATPEgress:
    def __init__(self, drop_simulator: DropSimulator, queue_depth: QueueDepth = no_queue) -> None:
        self._drop_simulator = drop_simulator
        self.queue_depth = queue_depth
        self.worker_addr_table = ExactMatchTable(
            f"{NAME}.worker_addr_table",
            [Field("meta.app_id", 16), Field("standard_metadata.egress_rid", 16)],
            {"set_worker_addr": [Field("mac", 48), Field("ipv4", 32), Field("udp_port", 16)], "drop": []},
            default="drop",
            size=params.WORKER_ADDR_TABLE_SIZE,
        )
        self.ecn_threshold = CellRegister(f"{NAME}.ecn_threshold", 1)
        self.ecn_threshold.cells[0] = params.DEFAULT_ECN_THRESHOLD
        self.egress_drop_threshold = CellRegister(f"{NAME}.egress_drop_threshold", 1)
        """Like ATPIngress.ingress_drop_threshold, for the link out of the switch."""
        self.egress_counter = Counter(f"{NAME}.egress_counter", len(params.EGRESS_EVENTS))

    def registers(self) -> list[CellRegister]:
        return [self.ecn_threshold, self.egress_drop_threshold]

    def address_result(self, frame: bytes, app_id: int, rid: int) -> bytearray | None:
        """The copy of a PS result for worker ``rid``: from the address the PS sent it to, to
        the worker's (SwitchML's result addressing); None on a worker_addr_table miss (drop)."""
        action, action_params = self.worker_addr_table.lookup((app_id, rid))
        if action != "set_worker_addr":
            return None
        headers = result_address_headers(frame[:ATP_OFFSET], *action_params)
        return bytearray(headers) + frame[ATP_OFFSET:]

    def drops(self, length: int) -> bool:
        """The drop simulator, first, for every copy the traffic manager hands to egress (a
        flood's echo is never made), before egress looks at it: True if the copy of ``length``
        bytes is lost on the link out (counted; not addressed, marked or sent)."""
        if self._drop_simulator.drops(self.egress_drop_threshold.cells[0]):
            self.egress_counter.count(EGV_DROP_SIM_EGRESS, length)
            return True
        return False

    def apply(self, frame: bytearray, port: int, is_atp: bool) -> bytearray:
        """For a copy the drop simulator kept: mark ECN from the port's queue, recompute the IPv4
        checksum (ATPComputeChecksum), count."""
        threshold = self.ecn_threshold.cells[0]
        if is_atp and threshold and self.queue_depth(port) >= threshold:
            frame[FLAGS_OFFSET] |= params.FLAG_ECN
            frame[IPV4_TOS_OFFSET] |= IPV4_ECN_CE
            self.egress_counter.count(EGV_ECN_MARKED, len(frame))
        compute_checksum(frame, len(frame))
        self.egress_counter.count(EGV_SENT, len(frame))
        return frame
