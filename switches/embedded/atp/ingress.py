"""ATPIngress: sender check, the shared aggregator pool, results freeing it, L2 forwarding.

Written in the order of docs/dataplane-atp.md ("ATPIngress") so it can be read beside the
future P4 program. ``apply`` edits the frame in place (flags, bitmap, fan-in, values) and
returns where it goes: DROP, (TO_PORT, port), (TO_GROUP, group) for a flood, or
(RESULT_TO_GROUP, group, app_id) for a PS result the egress addresses to each worker.

Isolation rests on the owner tag (app_id, seq): no packet adds into an aggregator another
job or another sequence holds. A packet that finds it taken goes to the PS tagged, and the
PS, which deduplicates by bitmap, finishes the sum; sharing costs collisions, never a wrong sum.
"""

from __future__ import annotations

import numpy as np

from protocol.atp import params
from protocol.atp.packet import ATP_OFFSET, DATA_OFFSET, FIELD_OFFSETS, payload_bytes
from protocol.packet import ELEMENT_DTYPE, UDP_HEADER_BYTES
from switches.embedded.atp.parser import (
    ATP_AGTR,
    ATP_APP_ID,
    ATP_BITMAP,
    ATP_FLAGS,
    ATP_SEQ,
    PARSER_ERROR,
)
from switches.embedded.drop_simulator import DropSimulator
from switches.embedded.parser import IPV4_SRC_ADDR, UDP_LENGTH
from switches.embedded.registers import CellRegister, Counter, ValueRegisters
from switches.embedded.tables import ExactMatchTable, Field

NAME = "ATPIngress"
DROP: tuple = ()
TO_PORT, TO_GROUP, RESULT_TO_GROUP = range(3)
EV = params.EVENT
BITMAP_OFFSET = ATP_OFFSET + FIELD_OFFSETS["bitmap"]
FAN_IN_OFFSET = ATP_OFFSET + FIELD_OFFSETS["fan_in"]
FLAGS_OFFSET = ATP_OFFSET + FIELD_OFFSETS["flags"]


class ATPIngress:
    """The pool's registers, the tables, the drop simulator's threshold and the event counter, and apply()."""

    def __init__(self, k: int, pool_size: int, drop_simulator: DropSimulator) -> None:
        if not 1 <= pool_size <= params.MAX_POOL_SIZE:
            raise ValueError(f"ATP pool size must be 1..{params.MAX_POOL_SIZE}, got {pool_size}")
        self.k = k
        self.pool_size = pool_size
        self._drop_simulator = drop_simulator
        self.ingress_drop_threshold = CellRegister(f"{NAME}.ingress_drop_threshold", 1)
        """Drop probability p as round(p * (2^32 - 1)), as SwitchMLIngress's (switches/drop_simulator.py)."""
        self.udp_length = UDP_HEADER_BYTES + payload_bytes(k)
        self.owner_app = CellRegister(f"{NAME}.owner_app", pool_size)
        self.owner_seq = CellRegister(f"{NAME}.owner_seq", pool_size)
        """The owner tag, app_id and seq (seq 0 = free: workers number from 1)."""
        self.bitmap = CellRegister(f"{NAME}.bitmap", pool_size)
        self.count = CellRegister(f"{NAME}.count", pool_size)
        self.ecn = CellRegister(f"{NAME}.ecn", pool_size)
        self.values = ValueRegisters(NAME, pool_size, k)
        self.event_counter = Counter(f"{NAME}.event_counter", len(params.INGRESS_EVENTS))
        self.sender_table = ExactMatchTable(
            f"{NAME}.sender_table",
            [Field("standard_metadata.ingress_port", 9), Field("hdr.ipv4.srcAddr", 32)],
            {
                "set_worker": [Field("app_id", 16), Field("worker_id", 8), Field("num_workers", 8), Field("ps_port", 9)],
                "set_ps": [Field("app_id", 16), Field("mcast_grp", 16)],
                "drop_unknown_sender": [],
            },
            default="drop_unknown_sender",
            size=params.SENDER_TABLE_SIZE,
        )
        self.l2_table = ExactMatchTable(
            f"{NAME}.l2_table", [Field("hdr.ethernet.dstAddr", 48)], {"l2_forward": [Field("port", 9)], "l2_flood": []},
            default="l2_flood", size=params.L2_TABLE_SIZE,
        )

    def registers(self) -> list:
        return [self.owner_app, self.owner_seq, self.bitmap, self.count, self.ecn,
                *(self.values.column(name) for name in self.values.names), self.ingress_drop_threshold]

    def tables(self) -> list[ExactMatchTable]:
        return [self.sender_table, self.l2_table]

    def apply(self, frame: bytearray, in_port: int, hdr: tuple | None) -> tuple:
        counter = self.event_counter
        length = len(frame)
        # 0. Drop simulator (ingress): loss on the link into the switch, for every frame.
        if self._drop_simulator.drops(self.ingress_drop_threshold.cells[0]):
            counter.count(EV["EV_DROP_SIM_INGRESS"], length)
            return DROP
        # 1. Not ATP: L2 forwarding.
        if hdr is None:
            counter.count(EV["EV_FORWARDED"], length)
            action, action_params = self.l2_table.lookup((int.from_bytes(frame[:6], "big"),))
            return (TO_PORT, action_params[0]) if action == "l2_forward" else (TO_GROUP, params.FLOOD_MCAST_GRP)
        # 2. Malformed: wrong length, aggregator index beyond the pool, or sequence 0 (which
        # would claim an aggregator and leave it looking free to every other job).
        if (hdr is PARSER_ERROR or hdr[UDP_LENGTH] != self.udp_length or hdr[ATP_AGTR] >= self.pool_size
                or hdr[ATP_SEQ] == 0):
            counter.count(EV["EV_DROP_MALFORMED"], length)
            return DROP
        # 3. sender_table: who sent it comes from (ingress port, source IPv4), never the packet.
        action, action_params = self.sender_table.lookup((in_port, hdr[IPV4_SRC_ADDR]))
        flags = hdr[ATP_FLAGS]
        if action == "set_ps":
            app_id, mcast_grp = action_params
            if not flags & params.FLAG_ACK or hdr[ATP_APP_ID] != app_id:
                counter.count(EV["EV_DROP_WRONG_JOB"], length)
                return DROP
            return self._result(frame, hdr, mcast_grp)
        if action != "set_worker":
            counter.count(EV["EV_DROP_UNKNOWN_SENDER"], length)
            return DROP
        app_id, worker_id, num_workers, ps_port = action_params
        # 4. A worker's packet names its own job and only its own bit; it cannot be a result.
        if hdr[ATP_APP_ID] != app_id or hdr[ATP_BITMAP] != 1 << worker_id or flags & params.FLAG_ACK:
            counter.count(EV["EV_DROP_WRONG_JOB"], length)
            return DROP
        frame[FAN_IN_OFFSET] = num_workers  # the fan-in comes from the table too
        # 5. Not summable in the switch: to the PS untouched.
        if flags & params.FLAG_OVERFLOW:
            counter.count(EV["EV_OVERFLOW_TO_PS"], length)
            return (TO_PORT, ps_port)
        index, seq = hdr[ATP_AGTR], hdr[ATP_SEQ]
        owned = self.owner_seq.cells[index] == seq and self.owner_app.cells[index] == app_id
        # 6. A resend never claims: it flushes its own aggregator's partial sum, or passes.
        if flags & params.FLAG_RESEND:
            if not owned:
                counter.count(EV["EV_RESEND_PASSED"], length)
                return (TO_PORT, ps_port)
            self._contribute(frame, index, hdr[ATP_BITMAP], flags)
            self._free(index)
            counter.count(EV["EV_RESEND_FLUSHED"], length)
            return (TO_PORT, ps_port)
        # 7. First claim, or a collision with whoever holds it.
        if not owned:
            if self.owner_seq.cells[index] != 0:
                frame[FLAGS_OFFSET] = flags | params.FLAG_COLLISION
                counter.count(EV["EV_COLLISION_TO_PS"], length)
                return (TO_PORT, ps_port)
            self.owner_app.cells[index] = app_id
            self.owner_seq.cells[index] = seq
        # 8. Aggregate; the sum leaves for the PS when the last contribution arrives.
        new = self._contribute(frame, index, hdr[ATP_BITMAP], flags)
        complete = self.count.cells[index] == num_workers
        if new and not complete:
            counter.count(EV["EV_AGGREGATED"], length)
            return DROP
        if not complete:
            counter.count(EV["EV_DUPLICATE_DROPPED"], length)
            return DROP
        counter.count(EV["EV_FULL_TO_PS" if new else "EV_DUPLICATE_TO_PS"], length)
        return (TO_PORT, ps_port)

    def _contribute(self, frame: bytearray, index: int, bit: int, flags: int) -> bool:
        """Add the packet's values if its bit is new (the first contributor writes), OR in its
        bit and ECN, and write the aggregator's sums, bitmap and ECN into the packet, which
        leaves with them if it goes on to the PS. Returns whether the bit was new."""
        held = self.bitmap.cells[index]
        new = not held & bit
        data = np.frombuffer(frame, ELEMENT_DTYPE, self.k, DATA_OFFSET)
        row = self.values.rows[index]
        if new:
            if held:
                row += data
            else:
                row[:] = data
            self.bitmap.cells[index] = held | bit
            self.count.cells[index] += 1
        data[:] = row
        ecn = self.ecn.cells[index] | (1 if flags & params.FLAG_ECN else 0)
        self.ecn.cells[index] = ecn
        frame[BITMAP_OFFSET:BITMAP_OFFSET + 4] = self.bitmap.cells[index].to_bytes(4, "big")
        frame[FLAGS_OFFSET] = flags | (params.FLAG_ECN if ecn else 0)
        return new

    def _free(self, index: int) -> None:
        self.owner_app.cells[index] = self.owner_seq.cells[index] = 0
        self.bitmap.cells[index] = self.count.cells[index] = self.ecn.cells[index] = 0

    def _result(self, frame: bytearray, hdr: tuple, mcast_grp: int) -> tuple:
        """A PS result frees the aggregator its sequence owns (values stay: the next first
        writer overwrites them) and goes to the job's workers. A "resend as float" request
        (overflow, not a resend) frees nothing."""
        index, app_id = hdr[ATP_AGTR], hdr[ATP_APP_ID]
        flags = hdr[ATP_FLAGS]
        owned = self.owner_seq.cells[index] == hdr[ATP_SEQ] and self.owner_app.cells[index] == app_id
        if owned and not (flags & params.FLAG_OVERFLOW and not flags & params.FLAG_RESEND):
            self._free(index)
            self.event_counter.count(EV["EV_RESULT_FREED"], len(frame))
        else:
            self.event_counter.count(EV["EV_RESULT_NOT_OWNER"], len(frame))
        return (RESULT_TO_GROUP, mcast_grp, app_id)

