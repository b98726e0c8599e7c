"""SwitchMLIngress: drop simulator, L2 forwarding with learning, worker table, aggregation.

Written in the order of docs/dataplane.md ("SwitchMLIngress (in this order)") so it can be
read beside p4/switchml.p4. ``apply`` returns where the packet goes next as a small tuple
(the traffic manager's input): DROP, (TO_PORT, port), (TO_GROUP, group),
(RESULT_TO_GROUP, group, job_id), (RESULT_TO_PORT, port, rank, job_id) or
(UPDATE_TO_PORT, port), a partial sum to the switch above (hierarchical aggregation). A
result or partial sum is written into the frame here (msg_type, exponent, elements,
addresses of a partial sum), as the P4 program's ingress does.
"""

from __future__ import annotations

import logging
import struct

from protocol.switchml import params
from protocol.packet import IPV4_OFFSET, UDP_HEADER_BYTES, UDP_OFFSET
from protocol.switchml.packet import payload_bytes
from switches.control import TableFullError
from switches.embedded.drop_simulator import DropSimulator
from switches.embedded.switchml.parser import (
    EXPONENT_OFFSET,
    MSG_TYPE_OFFSET,
    PARSER_ERROR,
    SWITCHML_EXPONENT,
    SWITCHML_JOB_ID,
    SWITCHML_MSG_TYPE,
    SWITCHML_NUM_ELEMENTS,
    SWITCHML_SEQ,
    SWITCHML_SHADOW_SET,
    SWITCHML_SLOT,
    PacketBuffer,
)
from switches.embedded.parser import IPV4_SRC_ADDR, UDP_LENGTH
from switches.embedded.registers import BIT32, CellRegister, Counter, ExponentRegister, ValueRegisters
from switches.embedded.switchml.responder import answer, switch_addr_table
from switches.embedded.tables import ExactMatchTable, Field

log = logging.getLogger(__name__)

NAME = "SwitchMLIngress"

DROP: tuple = ()
TO_PORT, TO_GROUP, RESULT_TO_GROUP, RESULT_TO_PORT, UPDATE_TO_PORT = range(5)

_C = params.P4_CONSTANTS
EV_UPDATE_CONSUMED = _C["EV_UPDATE_CONSUMED"]
EV_RESULT_MULTICAST = _C["EV_RESULT_MULTICAST"]
EV_RESULT_UNICAST = _C["EV_RESULT_UNICAST"]
EV_RETX_IGNORED = _C["EV_RETX_IGNORED"]
EV_DROP_UNKNOWN_SENDER = _C["EV_DROP_UNKNOWN_SENDER"]
EV_DROP_WRONG_JOB = _C["EV_DROP_WRONG_JOB"]
EV_DROP_MALFORMED = _C["EV_DROP_MALFORMED"]
EV_DROP_SIM_INGRESS = _C["EV_DROP_SIM_INGRESS"]
EV_FORWARDED = _C["EV_FORWARDED"]
EV_DROP_STALE = _C["EV_DROP_STALE"]
EV_DROP_OUTSIDE_POOL = _C["EV_DROP_OUTSIDE_POOL"]
EV_PARTIAL_UP = _C["EV_PARTIAL_UP"]
EV_L2_NOT_LEARNED = _C["EV_L2_NOT_LEARNED"]
UPDATE_OR_RESULT = (params.MSG_UPDATE, params.MSG_RESULT)
IPV4_SRC_BYTES = slice(IPV4_OFFSET + 12, IPV4_OFFSET + 16)
IPV4_DST_BYTES = slice(IPV4_OFFSET + 16, IPV4_OFFSET + 20)
UDP_SRC_BYTES = slice(UDP_OFFSET, UDP_OFFSET + 2)
UDP_DST_BYTES = slice(UDP_OFFSET + 2, UDP_OFFSET + 4)
UDP_CHECKSUM_BYTES = slice(UDP_OFFSET + 6, UDP_OFFSET + 8)

SEQ_HALF = 1 << 31
"""Sequence numbers wrap at 2^32; one is newer than another when it is less than 2^31 ahead."""

ETHERNET_ADDRESSES = struct.Struct("!HIHI")
"""dstAddr and srcAddr as (high 16, low 32) pairs: the L2 tables' keys."""
ETHERNET_HEADER_MIN = 14


class SwitchMLIngress:
    """Registers, tables and the event counter of the ingress control, and its apply()."""

    def __init__(self, k: int, max_pool_size: int, drop_simulator: DropSimulator) -> None:
        self.k = k
        self.max_pool_size = max_pool_size
        self._drop_simulator = drop_simulator
        cells = 2 * max_pool_size
        self.values = ValueRegisters(NAME, cells, k)
        self.bitmap = CellRegister(f"{NAME}.bitmap", cells)
        self.count = CellRegister(f"{NAME}.count", cells)
        self.exponent = ExponentRegister(f"{NAME}.exponent", cells)
        self.seq = CellRegister(f"{NAME}.seq", cells)
        self.ingress_drop_threshold = CellRegister(f"{NAME}.ingress_drop_threshold", 1)
        self.event_counter = Counter(f"{NAME}.event_counter", len(params.EVENT_COUNTER_CELLS))
        self.worker_table = ExactMatchTable(
            f"{NAME}.worker_table",
            [Field("standard_metadata.ingress_port", 9), Field("hdr.ipv4.srcAddr", 32)],
            {
                "set_worker": [
                    Field("rank", 8), Field("job_id", 16), Field("num_workers", 8), Field("mcast_grp", 16),
                    Field("slot_base", 16), Field("pool_size", 16),
                ],
                "forward_as_ordinary": [],
                "drop_unknown_sender": [],
            },
            default="drop_unknown_sender",
            size=_C["SWITCHML_WORKER_TABLE_SIZE"],
        )
        self.uplink_table = ExactMatchTable(
            f"{NAME}.uplink_table",
            [Field("meta.job_id", 16)],
            {
                "set_uplink": [
                    Field("port", 9), Field("src_mac", 48), Field("src_ipv4", 32), Field("dst_mac", 48), Field("dst_ipv4", 32),
                    Field("num_workers", 8), Field("mcast_grp", 16), Field("slot_base", 16), Field("pool_size", 16),
                ],
                "NoAction": [],
            },
            default="NoAction",
            size=_C["SWITCHML_UPLINK_TABLE_SIZE"],
        )
        self.uplink_table.on_change = self._index_uplinks
        self._uplinks: dict[int, tuple[int, ...]] = {}
        """job_id -> set_uplink's parameters: the table's set_uplink entries, for the data path."""
        self.l2_learn_table = ExactMatchTable(
            f"{NAME}.l2_learn_table", [Field("hdr.ethernet.srcAddr", 48)], {"NoAction": [], "l2_learn": []}, default="l2_learn",
            size=params.L2_TABLE_SIZE,
        )
        self.l2_table = ExactMatchTable(
            f"{NAME}.l2_table", [Field("hdr.ethernet.dstAddr", 48)], {"l2_forward": [Field("port", 9)], "l2_flood": []}, default="l2_flood",
            size=params.L2_TABLE_SIZE,
        )
        self.switch_addr_table = switch_addr_table()
        self.udp_length = UDP_HEADER_BYTES + payload_bytes(k)

    def registers(self) -> list:
        return [
            *(self.values.column(name) for name in self.values.names),
            self.bitmap,
            self.count,
            self.exponent,
            self.seq,
            self.ingress_drop_threshold,
        ]

    def _index_uplinks(self) -> None:
        self._uplinks = {key[0]: call[1] for key, call in self.uplink_table.entries.items() if call[0] == "set_uplink"}

    def tables(self) -> list[ExactMatchTable]:
        return [self.worker_table, self.uplink_table, self.l2_learn_table, self.l2_table, self.switch_addr_table]

    def apply(self, packet: PacketBuffer, in_port: int, length: int, hdr: tuple | None) -> tuple:
        counter = self.event_counter
        # 1. Drop simulator (ingress): every packet.
        if self._drop_simulator.drops(self.ingress_drop_threshold.cells[0]):
            counter.count(EV_DROP_SIM_INGRESS, length)
            return DROP
        if hdr is None:
            # 1b. ARP or ICMP echo for the switch's own address: answered out of the ingress port.
            event = answer(packet.frame, length, self.switch_addr_table)
            if event is not None:
                counter.count(event, length)
                return (TO_PORT, in_port)
            # 2. Not a SwitchML packet: L2 forwarding.
            return self._l2_forward(packet, in_port, length)
        # 3. Malformed SwitchML packet (neither an update nor a result, bad k, set or slot).
        if (
            hdr is PARSER_ERROR
            or hdr[SWITCHML_NUM_ELEMENTS] != self.k
            or hdr[UDP_LENGTH] != self.udp_length
            or hdr[SWITCHML_MSG_TYPE] not in UPDATE_OR_RESULT
            or hdr[SWITCHML_SHADOW_SET] > 1
            or hdr[SWITCHML_SLOT] >= self.max_pool_size
        ):
            counter.count(EV_DROP_MALFORMED, length)
            return DROP
        if hdr[SWITCHML_MSG_TYPE] == params.MSG_RESULT:
            return self._from_above(packet, in_port, length, hdr)
        # 4. worker_table: the rank comes from (ingress port, source IPv4), never the packet.
        action, action_params = self.worker_table.entries.get((in_port, hdr[IPV4_SRC_ADDR]), self.worker_table.default)
        if action != "set_worker":
            if action == "forward_as_ordinary":
                return self._l2_forward(packet, in_port, length)
            counter.count(EV_DROP_UNKNOWN_SENDER, length)
            return DROP
        rank, job_id, num_workers, mcast_grp, slot_base, pool_size = action_params
        # 5. Wrong job.
        if hdr[SWITCHML_JOB_ID] != job_id:
            counter.count(EV_DROP_WRONG_JOB, length)
            return DROP
        uplink = self._uplinks.get(job_id)
        # 5b. Beyond the job's slot range (other jobs' cells), or past the registers.
        if self._outside_pool(hdr[SWITCHML_SLOT], slot_base, pool_size):
            counter.count(EV_DROP_OUTSIDE_POOL, length)
            return DROP
        # 6. Aggregation.
        return self._aggregate(packet, in_port, length, hdr, rank, num_workers, mcast_grp, slot_base, uplink)

    def _outside_pool(self, slot: int, slot_base: int, pool_size: int) -> bool:
        """Step 5b: the slot is beyond the job's pool, or its cell past the registers (an
        entry the control plane should have refused), where it would index another shadow
        set's or job's cell, or none."""
        return slot >= pool_size or slot_base + slot >= self.max_pool_size

    def _from_above(self, packet: PacketBuffer, in_port: int, length: int, hdr: tuple) -> tuple:
        """4R-6R: a result from the job's uplink completes the version this switch sent its
        partial sum up for; kept for retransmissions and multicast to the job's workers."""
        counter = self.event_counter
        uplink = self._uplinks.get(hdr[SWITCHML_JOB_ID])
        if uplink is None or in_port != uplink[0] or hdr[IPV4_SRC_ADDR] != uplink[4]:
            counter.count(EV_DROP_MALFORMED, length)
            return DROP
        num_workers, mcast_grp, slot_base, pool_size = uplink[5:]
        if self._outside_pool(hdr[SWITCHML_SLOT], slot_base, pool_size):
            counter.count(EV_DROP_OUTSIDE_POOL, length)
            return DROP
        idx = hdr[SWITCHML_SHADOW_SET] * self.max_pool_size + slot_base + hdr[SWITCHML_SLOT]
        if self.count.cells[idx] != num_workers or self.seq.cells[idx] != hdr[SWITCHML_SEQ]:
            counter.count(EV_DROP_STALE, length)
            return DROP
        self.values.rows[idx][:] = packet.data
        self.exponent.cells[idx] = hdr[SWITCHML_EXPONENT]
        self.count.cells[idx] = num_workers + 1
        # SwitchMLEgress's result headers answer from the update's destination; this result
        # already carries its source (the switch above), so it becomes the destination first.
        frame = packet.frame
        frame[0:6], frame[IPV4_DST_BYTES], frame[UDP_DST_BYTES] = frame[6:12], frame[IPV4_SRC_BYTES], frame[UDP_SRC_BYTES]
        counter.count(EV_RESULT_MULTICAST, length)
        return (RESULT_TO_GROUP, mcast_grp, hdr[SWITCHML_JOB_ID])

    def _aggregate(
        self, packet: PacketBuffer, in_port: int, length: int, hdr: tuple, rank: int, num_workers: int, mcast_grp: int, slot_base: int,
        uplink: tuple[int, ...] | None,
    ) -> tuple:
        rank_bit = (1 << rank) & BIT32
        shadow_set, cell = hdr[SWITCHML_SHADOW_SET], slot_base + hdr[SWITCHML_SLOT]
        idx = shadow_set * self.max_pool_size + cell
        other = (1 - shadow_set) * self.max_pool_size + cell
        bitmap = self.bitmap.cells
        count = self.count.cells
        exponent = self.exponent.cells
        version_seq = self.seq.cells
        row = self.values.rows[idx]
        counter = self.event_counter
        complete = num_workers if uplink is None else num_workers + 1
        b = bitmap[idx]
        seq = hdr[SWITCHML_SEQ]
        is_new = not b & rank_bit
        # 6a. Stale: an update of an older version than the one this cell holds.
        if is_new and b == 0:  # opening a version: stale unless newer than the last one held
            ahead = (seq - version_seq[idx]) & BIT32  # (int<32>)(seq - version_seq) > 0 <=> 0 < ahead < 2^31
            stale = count[idx] != 0 and not 0 < ahead < SEQ_HALF
        elif is_new:  # joining a version: this one, and not complete (complete ones take no new ranks)
            stale = seq != version_seq[idx] or count[idx] >= num_workers
        else:
            stale = seq != version_seq[idx]
        if stale:
            counter.count(EV_DROP_STALE, length)
            return DROP
        if is_new:  # a new contribution
            # BEGIN LAB 2: set the rank bit (and clear it in the other set), store the first contribution or add, keep the max exponent, count
            bitmap[idx] = b | rank_bit
            bitmap[other] &= ~rank_bit & BIT32
            if b == 0:  # first contribution of this version
                row[:] = packet.data
                exponent[idx] = hdr[SWITCHML_EXPONENT]
                count[idx] = 1
                version_seq[idx] = seq
            else:
                row += packet.data  # int32: wraps like bit<32>
                if hdr[SWITCHML_EXPONENT] > exponent[idx]:
                    exponent[idx] = hdr[SWITCHML_EXPONENT]
                count[idx] += 1
            # END LAB 2
            if uplink is not None and count[idx] == num_workers:  # the local sum goes up as one worker of the switch above
                return self._send_up(packet, row, exponent[idx], uplink, length)
            # BEGIN LAB 2: every worker in: write the result, count EV_RESULT_MULTICAST, multicast it; else count EV_UPDATE_CONSUMED, drop
            if count[idx] == num_workers:
                self._write_result(packet, row, exponent[idx])
                counter.packets[EV_RESULT_MULTICAST] += 1  # counter.count() inlined: the hot path
                counter.bytes[EV_RESULT_MULTICAST] += length
                return (RESULT_TO_GROUP, mcast_grp, hdr[SWITCHML_JOB_ID])
            counter.packets[EV_UPDATE_CONSUMED] += 1
            counter.bytes[EV_UPDATE_CONSUMED] += length
            return DROP
            # END LAB 2
        # a retransmission
        if uplink is not None and count[idx] == num_workers:  # the result from above is missing: ask again
            return self._send_up(packet, row, exponent[idx], uplink, length)
        if count[idx] == complete:  # the worker lost the result
            # BEGIN LAB 3: a retransmission to a complete version: write the stored result, count EV_RESULT_UNICAST, send it to its sender only
            self._write_result(packet, row, exponent[idx])
            counter.count(EV_RESULT_UNICAST, length)
            return (RESULT_TO_PORT, in_port, rank, hdr[SWITCHML_JOB_ID])
            # END LAB 3
        # BEGIN LAB 3: a retransmission before completion: count EV_RETX_IGNORED and drop it
        counter.count(EV_RETX_IGNORED, length)
        return DROP
        # END LAB 3

    def _send_up(self, packet: PacketBuffer, row, exponent: int, uplink: tuple[int, ...], length: int) -> tuple:
        """send_up(): the local sum leaves as this switch's update to the switch above."""
        port, src_mac, src_ipv4, dst_mac, dst_ipv4 = uplink[:5]
        packet.data[:] = row
        frame = packet.frame
        frame[EXPONENT_OFFSET] = exponent & 0xFF
        frame[0:12] = dst_mac.to_bytes(6, "big") + src_mac.to_bytes(6, "big")
        frame[IPV4_SRC_BYTES] = src_ipv4.to_bytes(4, "big")
        frame[IPV4_DST_BYTES] = dst_ipv4.to_bytes(4, "big")
        frame[UDP_CHECKSUM_BYTES] = b"\0\0"
        self.event_counter.count(EV_PARTIAL_UP, length)
        return (UPDATE_TO_PORT, port)

    @staticmethod
    def _write_result(packet: PacketBuffer, row, exponent: int) -> None:
        """data.dXX = value_XX[idx]; exponent = max; msg_type = RESULT (other fields echo)."""
        packet.data[:] = row
        frame = packet.frame
        frame[MSG_TYPE_OFFSET] = params.MSG_RESULT
        frame[EXPONENT_OFFSET] = exponent & 0xFF

    def _l2_forward(self, packet: PacketBuffer, in_port: int, length: int) -> tuple:
        """l2_learn_table, then l2_table or flood; our own learn digest is answered after the
        lookup, because a controller answers it only after the packet has left: a frame to
        its own, not yet learned, source MAC is flooded (as on bmv2), not sent back."""
        if length < ETHERNET_HEADER_MIN:
            self.event_counter.count(EV_DROP_MALFORMED, length)
            return DROP
        dst_hi, dst_lo, src_hi, src_lo = ETHERNET_ADDRESSES.unpack_from(packet.frame)
        action, action_params = self.l2_table.entries.get((dst_hi << 32 | dst_lo,), self.l2_table.default)
        src = src_hi << 32 | src_lo
        if (src,) not in self.l2_learn_table.entries:
            self._learn(src, in_port, length)
        self.event_counter.count(EV_FORWARDED, length)
        if action == "l2_forward":
            return (TO_PORT, action_params[0])
        return (TO_GROUP, params.FLOOD_MCAST_GRP)

    def _learn(self, src: int, in_port: int, length: int) -> None:
        """The l2_learn digest {srcAddr, ingress_port, packet_length}, handled as the learning
        controller does: a source that a full table cannot take is counted, not learned."""
        log.debug("l2_learn %012x on port %d", src, in_port)
        try:
            self.l2_learn_table.add("NoAction", [src], [])
            if (src,) not in self.l2_table.entries:
                self.l2_table.add("l2_forward", [src], [in_port])
        except TableFullError:
            self.event_counter.count(EV_L2_NOT_LEARNED, length)
