"""The eBPF switch's maps as the control plane sees them: C layouts and P4 names.

Each ctypes structure below mirrors one struct of switchml.bpf.c field by field (the
control plane checks every map's key and value sizes against them when it opens the
maps, so a drift fails loudly); those every program of the target shares (a table's
layout, the multicast and counter cells) are switches/ebpf/map_control.py's. Table values
start with the action number (from switchml.h, read the way protocol/switchml/params.py reads
constants.p4) followed by the action's parameters under their P4 names, so an entry is
written as ``Value(action=n, **params)``.

The program is built per k (compile.py), and k sets the size of a register cell and of
the scratch map, and how many value_XX registers there are: those layouts are functions
of the k the switch was started with (``layouts(k)``, ``program_schema(k, pool)``), the
rest is the same for every build.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Mapping

from protocol import params
from protocol.switchml import params as switchml_params
from switches.control import Field, ProgramSchema, RegisterSchema
from switches.ebpf.loader import IFINDEX_OF_PORT_MAP, PORT_OF_IFINDEX_MAP
from switches.ebpf.map_control import (
    MC,
    MC_GROUP_MAP,
    MC_NODE_MAP,
    CounterCell,
    L2Action,
    MacKey,
    TableLayout,
    Threshold,
    U32Key,
    drop_threshold_maps,
)
from switches.switchml.programming import DROP_SIMULATOR, value_registers

EBPF_DIR = Path(__file__).resolve().parent
SWITCHML_H = EBPF_DIR / "switchml.h"
DEFINES = params.read_p4_constants(SWITCHML_H)

INGRESS = "SwitchMLIngress"
EGRESS = "SwitchMLEgress"



# -- SwitchMLIngress registers ----------------------------------------------------------


@functools.cache
def slot_cells(k: int) -> type[ctypes.Structure]:
    """struct slot_cells of a build for k: both shadow sets of one slot behind one
    bpf_spin_lock, each a struct register_cell (bitmap, count, exponent, seq, value[k]).
    One class per k (cached), so cells of two builds are never mistaken for each other."""

    class RegisterCell(ctypes.Structure):
        _fields_ = [
            ("bitmap", ctypes.c_uint32),
            ("count", ctypes.c_uint32),
            ("exponent", ctypes.c_uint32),
            ("seq", ctypes.c_uint32),
            ("value", ctypes.c_uint32 * k),
        ]

    class SlotCells(ctypes.Structure):
        _fields_ = [("lock", ctypes.c_uint32), ("set", RegisterCell * 2)]

    SlotCells.__name__ = SlotCells.__qualname__ = f"SlotCells{k}"
    return SlotCells


@functools.cache
def switchml_data(k: int) -> type[ctypes.Structure]:
    """struct switchml_data of a build for k: the scratch map's cell (one packet's elements).
    Only the data path uses it; the control plane checks its size like every map's."""

    class SwitchMLData(ctypes.Structure):
        _fields_ = [("d", ctypes.c_uint32 * k)]

    SwitchMLData.__name__ = SwitchMLData.__qualname__ = f"SwitchMLData{k}"
    return SwitchMLData


# -- tables -------------------------------------------------------------------------------


class WorkerKey(ctypes.Structure):
    _fields_ = [("ingress_port", ctypes.c_uint32), ("src_addr", ctypes.c_uint32)]


class WorkerAction(ctypes.Structure):
    _fields_ = [
        ("action", ctypes.c_uint32),
        ("rank", ctypes.c_uint32),
        ("job_id", ctypes.c_uint32),
        ("num_workers", ctypes.c_uint32),
        ("mcast_grp", ctypes.c_uint32),
        ("slot_base", ctypes.c_uint32),
        ("pool_size", ctypes.c_uint32),
    ]


class JobKey(ctypes.Structure):
    _fields_ = [("job_id", ctypes.c_uint32)]


class UplinkAction(ctypes.Structure):
    _fields_ = [
        ("action", ctypes.c_uint32),
        ("port", ctypes.c_uint32),
        ("src_ipv4", ctypes.c_uint32),
        ("dst_ipv4", ctypes.c_uint32),
        ("num_workers", ctypes.c_uint32),
        ("mcast_grp", ctypes.c_uint32),
        ("slot_base", ctypes.c_uint32),
        ("pool_size", ctypes.c_uint32),
        ("src_mac", ctypes.c_uint64),
        ("dst_mac", ctypes.c_uint64),
    ]


class L2LearnAction(ctypes.Structure):
    _fields_ = [("action", ctypes.c_uint32)]


class RankKey(ctypes.Structure):
    _fields_ = [("job_id", ctypes.c_uint32), ("dst_rank", ctypes.c_uint32)]


class RankAddrAction(ctypes.Structure):
    _fields_ = [
        ("action", ctypes.c_uint32),
        ("ipv4", ctypes.c_uint32),
        ("mac", ctypes.c_uint64),
        ("udp_port", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
    ]


class Ipv4Key(ctypes.Structure):
    _fields_ = [("ipv4", ctypes.c_uint32)]


class SwitchAddrAction(ctypes.Structure):
    _fields_ = [("action", ctypes.c_uint32), ("reserved", ctypes.c_uint32), ("mac", ctypes.c_uint64)]


# -- what the P4 names map to ---------------------------------------------------------------


TABLES: Mapping[str, TableLayout] = {
    f"{INGRESS}.worker_table": TableLayout(
        "worker_table",
        (Field("standard_metadata.ingress_port", 9), Field("hdr.ipv4.srcAddr", 32)),
        WorkerKey,
        {
            "set_worker": (
                DEFINES["WORKER_TABLE_SET_WORKER"],
                (
                    Field("rank", 8), Field("job_id", 16), Field("num_workers", 8), Field("mcast_grp", 16),
                    Field("slot_base", 16), Field("pool_size", 16),
                ),
            ),
            "forward_as_ordinary": (DEFINES["WORKER_TABLE_FORWARD_AS_ORDINARY"], ()),
            "drop_unknown_sender": (DEFINES["WORKER_TABLE_DROP_UNKNOWN_SENDER"], ()),
        },
        WorkerAction,
        switchml_params.P4_CONSTANTS["SWITCHML_WORKER_TABLE_SIZE"],
    ),
    f"{INGRESS}.uplink_table": TableLayout(
        "uplink_table",
        (Field("meta.job_id", 16),),
        JobKey,
        {
            "set_uplink": (
                DEFINES["UPLINK_TABLE_SET_UPLINK"],
                (
                    Field("port", 9), Field("src_mac", 48), Field("src_ipv4", 32), Field("dst_mac", 48), Field("dst_ipv4", 32),
                    Field("num_workers", 8), Field("mcast_grp", 16), Field("slot_base", 16), Field("pool_size", 16),
                ),
            ),
            "NoAction": (DEFINES["UPLINK_TABLE_NOACTION"], ()),
        },
        UplinkAction,
        switchml_params.P4_CONSTANTS["SWITCHML_UPLINK_TABLE_SIZE"],
    ),
    f"{INGRESS}.l2_learn_table": TableLayout(
        "l2_learn_table",
        (Field("hdr.ethernet.srcAddr", 48),),
        MacKey,
        {"NoAction": (DEFINES["L2_LEARN_TABLE_NOACTION"], ()), "l2_learn": (DEFINES["L2_LEARN_TABLE_L2_LEARN"], ())},
        L2LearnAction,
        switchml_params.L2_TABLE_SIZE,
    ),
    f"{INGRESS}.l2_table": TableLayout(
        "l2_table",
        (Field("hdr.ethernet.dstAddr", 48),),
        MacKey,
        {"l2_forward": (DEFINES["L2_TABLE_L2_FORWARD"], (Field("port", 9),)), "l2_flood": (DEFINES["L2_TABLE_L2_FLOOD"], ())},
        L2Action,
        switchml_params.L2_TABLE_SIZE,
    ),
    f"{INGRESS}.switch_addr_table": TableLayout(
        "switch_addr_table",
        (Field("meta.target_ipv4", 32),),
        Ipv4Key,
        {
            "set_switch_mac": (DEFINES["SWITCH_ADDR_TABLE_SET_SWITCH_MAC"], (Field("mac", 48),)),
            "NoAction": (DEFINES["SWITCH_ADDR_TABLE_NOACTION"], ()),
        },
        SwitchAddrAction,
        switchml_params.P4_CONSTANTS["SWITCHML_SWITCH_ADDR_TABLE_SIZE"],
    ),
    f"{EGRESS}.rank_addr_table": TableLayout(
        "rank_addr_table",
        (Field("meta.job_id", 16), Field("meta.dst_rank", 8)),
        RankKey,
        {
            "set_rank_addr": (
                DEFINES["RANK_ADDR_TABLE_SET_RANK_ADDR"],
                (Field("mac", 48), Field("ipv4", 32), Field("udp_port", 16)),
            ),
            "drop": (DEFINES["RANK_ADDR_TABLE_DROP"], ()),
        },
        RankAddrAction,
        switchml_params.P4_CONSTANTS["SWITCHML_RANK_ADDR_TABLE_SIZE"],
    ),
}

@functools.cache
def aggregation_fields(k: int) -> Mapping[str, tuple[str, int | None]]:
    """Register name -> (field of struct register_cell, element index for value_XX), for a
    build for k (value_00 .. value_{k-1}, named as switches/switchml/programming.py names them)."""
    return {
        **{name: ("value", i) for i, name in enumerate(value_registers(k))},
        f"{INGRESS}.bitmap": ("bitmap", None),
        f"{INGRESS}.count": ("count", None),
        f"{INGRESS}.exponent": ("exponent", None),
        f"{INGRESS}.seq": ("seq", None),
    }


AGGREGATION_MAP = "registers"
SCRATCH_MAP = "scratch"

THRESHOLDS: Mapping[str, str] = drop_threshold_maps(DROP_SIMULATOR)
"""One-cell registers -> their maps: the drop simulator's (tc_switch.h)."""

COUNTERS: Mapping[str, str] = {f"{INGRESS}.event_counter": "event_counter", f"{EGRESS}.egress_counter": "egress_counter"}


FIXED_LAYOUTS: Mapping[str, tuple[type[ctypes.Structure], type[ctypes.Structure]]] = {
    **{name: (U32Key, Threshold) for name in THRESHOLDS.values()},
    **{name: (U32Key, CounterCell) for name in COUNTERS.values()},
    **{t.map_name: (t.key_type, t.value_type) for t in TABLES.values()},
    **{t.default_map_name: (U32Key, t.value_type) for t in TABLES.values()},
    MC_GROUP_MAP: (U32Key, MC.group),
    MC_NODE_MAP: (U32Key, MC.node),
    PORT_OF_IFINDEX_MAP: (U32Key, U32Key),
    IFINDEX_OF_PORT_MAP: (U32Key, U32Key),
}
"""The maps whose layout is the same at every k."""


def layouts(k: int) -> Mapping[str, tuple[type[ctypes.Structure], type[ctypes.Structure]]]:
    """Every map of switchml.bpf.c built for k: (key, value) layout."""
    return {
        AGGREGATION_MAP: (U32Key, slot_cells(k)),
        SCRATCH_MAP: (U32Key, switchml_data(k)),
        **FIXED_LAYOUTS,
    }


def program_schema(k: int, max_pool_size: int) -> ProgramSchema:
    """The tables, registers and counters the program built for k offers, by their P4 names."""
    registers = {name: RegisterSchema(2 * max_pool_size, 32) for name in aggregation_fields(k)}
    registers.update({name: RegisterSchema(1, 32) for name in THRESHOLDS})
    return ProgramSchema(
        tables={name: table.schema() for name, table in TABLES.items()},
        registers=registers,
        counters={f"{INGRESS}.event_counter": len(switchml_params.EVENT_COUNTER_CELLS), f"{EGRESS}.egress_counter": len(switchml_params.EGRESS_EVENTS)},
    )
