"""ATP's eBPF maps as the control plane sees them: C layouts (atp.bpf.c) and the names of
docs/dataplane-atp.md.

Table values start with the action number (atp.h) followed by the action's parameters under
their P4 names. The aggregator's layout and the number of value_XX registers follow the k
the program was built for (``aggregator(k)``, ``program_schema(k, pool)``). The schema is
the embedded ATPPipeline's plus the phantom queue's rate and limit, one cell per port, which
only this target has (its ECN queue is virtual).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Mapping

from protocol.atp import params
from protocol.params import read_p4_constants
from switches.control import Field, ProgramSchema, RegisterSchema
from switches.ebpf.loader import IFINDEX_OF_PORT_MAP, PORT_OF_IFINDEX_MAP
from switches.ebpf.map_control import (
    MC,
    MC_GROUP_MAP,
    MC_NODE_MAP,
    PORT_NUMBERS,
    CounterCell,
    L2Action,
    MacKey,
    TableLayout,
    Threshold,
    U32Key,
    drop_threshold_maps,
)
from switches.atp.programming import DROP_SIMULATOR

ATP_H = Path(__file__).resolve().parent / "atp.h"
DEFINES = read_p4_constants(ATP_H)
INGRESS = "ATPIngress"
EGRESS = "ATPEgress"


@functools.cache
def aggregator(k: int) -> type[ctypes.Structure]:
    """struct aggregator of a build for k: the lock, the owner tag, bitmap, count, ecn, k values."""

    class Aggregator(ctypes.Structure):
        _fields_ = [
            ("lock", ctypes.c_uint32),
            ("owner_app", ctypes.c_uint32),
            ("owner_seq", ctypes.c_uint32),
            ("bitmap", ctypes.c_uint32),
            ("count", ctypes.c_uint32),
            ("ecn", ctypes.c_uint32),
            ("value", ctypes.c_uint32 * k),
        ]

    Aggregator.__name__ = Aggregator.__qualname__ = f"Aggregator{k}"
    return Aggregator


@functools.cache
def atp_data(k: int) -> type[ctypes.Structure]:
    """struct atp_data: the scratch cell (one packet's values), the data path's alone."""

    class AtpData(ctypes.Structure):
        _fields_ = [("d", ctypes.c_uint32 * k)]

    AtpData.__name__ = AtpData.__qualname__ = f"AtpData{k}"
    return AtpData


class PhantomQueue(ctypes.Structure):
    _fields_ = [("lock", ctypes.c_uint32), ("rate_kbps", ctypes.c_uint32), ("limit", ctypes.c_uint32), ("reserved", ctypes.c_uint32),
                ("busy_until_ns", ctypes.c_uint64)]


class SenderKey(ctypes.Structure):
    _fields_ = [("ingress_port", ctypes.c_uint32), ("src_addr", ctypes.c_uint32)]


class SenderAction(ctypes.Structure):
    _fields_ = [
        ("action", ctypes.c_uint32),
        ("app_id", ctypes.c_uint32),
        ("worker_id", ctypes.c_uint32),
        ("num_workers", ctypes.c_uint32),
        ("ps_port", ctypes.c_uint32),
        ("mcast_grp", ctypes.c_uint32),
    ]


class WorkerAddrKey(ctypes.Structure):
    _fields_ = [("app_id", ctypes.c_uint32), ("rid", ctypes.c_uint32)]


class WorkerAddrAction(ctypes.Structure):
    _fields_ = [
        ("action", ctypes.c_uint32),
        ("ipv4", ctypes.c_uint32),
        ("mac", ctypes.c_uint64),
        ("udp_port", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


TABLES: Mapping[str, TableLayout] = {
    f"{INGRESS}.sender_table": TableLayout(
        "sender_table",
        (Field("standard_metadata.ingress_port", 9), Field("hdr.ipv4.srcAddr", 32)),
        SenderKey,
        {
            "set_worker": (DEFINES["SENDER_TABLE_SET_WORKER"],
                           (Field("app_id", 16), Field("worker_id", 8), Field("num_workers", 8), Field("ps_port", 9))),
            "set_ps": (DEFINES["SENDER_TABLE_SET_PS"], (Field("app_id", 16), Field("mcast_grp", 16))),
            "drop_unknown_sender": (DEFINES["SENDER_TABLE_DROP_UNKNOWN_SENDER"], ()),
        },
        SenderAction,
        params.SENDER_TABLE_SIZE,
    ),
    f"{INGRESS}.l2_table": TableLayout(
        "l2_table",
        (Field("hdr.ethernet.dstAddr", 48),),
        MacKey,
        {"l2_forward": (DEFINES["L2_TABLE_L2_FORWARD"], (Field("port", 9),)), "l2_flood": (DEFINES["L2_TABLE_L2_FLOOD"], ())},
        L2Action,
        params.L2_TABLE_SIZE,
    ),
    f"{EGRESS}.worker_addr_table": TableLayout(
        "worker_addr_table",
        (Field("meta.app_id", 16), Field("standard_metadata.egress_rid", 16)),
        WorkerAddrKey,
        {
            "set_worker_addr": (DEFINES["WORKER_ADDR_TABLE_SET_WORKER_ADDR"],
                                (Field("mac", 48), Field("ipv4", 32), Field("udp_port", 16))),
            "drop": (DEFINES["WORKER_ADDR_TABLE_DROP"], ()),
        },
        WorkerAddrAction,
        params.WORKER_ADDR_TABLE_SIZE,
    ),
}

AGGREGATOR_MAP = "aggregators"
SCRATCH_MAP = "scratch"
ECN_THRESHOLD = f"{EGRESS}.ecn_threshold"
ECN_THRESHOLD_MAP = "ecn_threshold"
THRESHOLDS: Mapping[str, str] = {ECN_THRESHOLD: ECN_THRESHOLD_MAP, **drop_threshold_maps(DROP_SIMULATOR)}
"""One-cell registers -> their maps: ecn_threshold and the drop simulator's (tc_switch.h)."""
PHANTOM_QUEUE_RATE = f"{EGRESS}.phantom_queue_rate"
"""Kbit/s at which each port's phantom queue drains (register cell = port); 0: none, never marks."""
PHANTOM_QUEUE_LIMIT = f"{EGRESS}.phantom_queue_limit"
"""Frames each port's phantom queue holds at most, its real queue's limit (register cell = port); 0: no limit."""
PHANTOM_QUEUE_FIELDS: Mapping[str, str] = {PHANTOM_QUEUE_RATE: "rate_kbps", PHANTOM_QUEUE_LIMIT: "limit"}
"""The phantom queue's registers -> their fields of struct phantom_queue."""
PHANTOM_QUEUE_MAP = "phantom_queue"


def phantom_queue_rate(rate_bps: float) -> int:
    """PHANTOM_QUEUE_RATE's cell for a port of ``rate_bps`` (kbit/s: the program's unit)."""
    return round(rate_bps / 1000)


AGGREGATOR_FIELDS = ("owner_app", "owner_seq", "bitmap", "count", "ecn")
"""The aggregator's registers besides value_XX, each a field of struct aggregator."""
COUNTERS: Mapping[str, str] = {f"{INGRESS}.event_counter": "event_counter", f"{EGRESS}.egress_counter": "egress_counter"}
COUNTER_CELLS = {f"{INGRESS}.event_counter": len(params.INGRESS_EVENTS), f"{EGRESS}.egress_counter": len(params.EGRESS_EVENTS)}


def value_registers(k: int) -> tuple[str, ...]:
    return tuple(f"{INGRESS}.value_{i:02d}" for i in range(k))


@functools.cache
def aggregator_registers(k: int) -> Mapping[str, tuple[str, int | None]]:
    """Register name -> (field of struct aggregator, element index for value_XX)."""
    return {**{f"{INGRESS}.{name}": (name, None) for name in AGGREGATOR_FIELDS},
            **{name: ("value", i) for i, name in enumerate(value_registers(k))}}


def layouts(k: int) -> Mapping[str, tuple[type[ctypes.Structure], type[ctypes.Structure]]]:
    """Every map of atp.bpf.c built for k: (key, value) layout."""
    return {
        AGGREGATOR_MAP: (U32Key, aggregator(k)),
        SCRATCH_MAP: (U32Key, atp_data(k)),
        **{name: (U32Key, Threshold) for name in THRESHOLDS.values()},
        PHANTOM_QUEUE_MAP: (U32Key, PhantomQueue),
        **{name: (U32Key, CounterCell) for name in COUNTERS.values()},
        **{t.map_name: (t.key_type, t.value_type) for t in TABLES.values()},
        **{t.default_map_name: (U32Key, t.value_type) for t in TABLES.values()},
        MC_GROUP_MAP: (U32Key, MC.group),
        MC_NODE_MAP: (U32Key, MC.node),
        PORT_OF_IFINDEX_MAP: (U32Key, U32Key),
        IFINDEX_OF_PORT_MAP: (U32Key, U32Key),
    }


def program_schema(k: int, pool_size: int) -> ProgramSchema:
    """The tables, registers and counters the program built for k and pool_size offers."""
    registers = {name: RegisterSchema(pool_size, 32) for name in aggregator_registers(k)}
    registers.update({name: RegisterSchema(1, 32) for name in THRESHOLDS})
    registers.update({name: RegisterSchema(PORT_NUMBERS, 32) for name in PHANTOM_QUEUE_FIELDS})
    return ProgramSchema(tables={name: table.schema() for name, table in TABLES.items()}, registers=registers,
                         counters=dict(COUNTER_CELLS))
