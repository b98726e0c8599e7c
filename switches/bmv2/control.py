"""``SwitchControl`` for bmv2: each primitive is one call of p4-utils' ``SimpleSwitchThriftAPI``.

p4-utils' public methods catch every error, print it and return None (they were written
for an interactive CLI). A testbed must not carry on after the switch refused an entry,
so this module calls the undecorated functions (``__wrapped__``, kept by functools.wraps)
and turns p4-utils' and Thrift's exceptions into ``ControlPlaneError``; what they print
goes to the debug log instead of the terminal.

p4utils (and bmv2's Thrift bindings it imports) exist only where bmv2 is installed, so
they are imported when a ``Bmv2Control`` is created, never when this module is imported.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from switches.control import (
    ControlPlaneError,
    Field,
    MatchValue,
    ProgramSchema,
    RegisterSchema,
    SwitchControl,
    TableSchema,
    duplicate_entry_error,
    mc_group_exists_error,
    mc_group_missing_error,
    mc_node_missing_error,
    parse_value,
    table_full_error,
)
from switches.drop_simulator import INGRESS_DROP_THRESHOLD

log = logging.getLogger(__name__)

THRIFT_TIMEOUT_S = 30.0
"""Longest a control-plane call may take (resetting every register of a 512-slot build
takes well under a second); beyond it simple_switch is hung, and the call fails."""

INGRESS_CLOSED = 0xFFFFFFFF
"""The ingress drop threshold no draw is below (v1model's random() gives 0..0xFFFFFFFE): every packet dropped."""
INGRESS_DRAIN_S = 0.02
"""What a packet already in the ingress pipeline when it closes takes to leave it: bmv2's
default build spends ~0.3 ms of CPU on one k = 256 update; the margin is for a busy machine."""

THRIFT_ERROR_CODES = {"InvalidTableOperation": "TableOperationErrorCode", "InvalidMcOperation": "McOperationErrorCode"}
"""bmv2 Thrift exception -> the enum of its ``code`` field, in the same ttypes module."""


STDOUT_CAPTURE = threading.Lock()
"""p4-utils prints instead of returning; capturing it swaps the process-wide sys.stdout.
Two threads (the runner, a learning controller) swapping it at once can leave it pointing
at a finished call's buffer, after which every print vanishes; so one capture at a time:
``with STDOUT_CAPTURE, contextlib.redirect_stdout(buffer)``. (Not a generator-based context
manager: re-raising through one sets ``__traceback__``, which Thrift's exceptions refuse.)"""


def _as_api_argument(value: MatchValue) -> str:
    """p4-utils wants strings; a decimal integer is valid for a key or parameter of any width."""
    return str(parse_value(value))


class Bmv2Control(SwitchControl):
    """Control plane of one running simple_switch, over its Thrift port."""

    def __init__(
        self,
        thrift_port: int,
        json_path: Path | None = None,
        command_log: Path | None = None,
        thrift_ip: str = "127.0.0.1",
    ) -> None:
        """Connect to simple_switch; ``json_path`` avoids fetching the program over Thrift."""
        super().__init__(command_log)
        from p4utils.utils import thrift_API
        from p4utils.utils.sswitch_thrift_API import SimpleSwitchThriftAPI
        from thrift.Thrift import TException

        self._errors: tuple[type[BaseException], ...] = (thrift_API.UIn_Error, TException)
        self._res_type = thrift_API.ResType
        self._where = f"simple_switch at {thrift_ip}:{thrift_port}"
        printed = io.StringIO()
        try:
            with STDOUT_CAPTURE, contextlib.redirect_stdout(printed):
                self._api = SimpleSwitchThriftAPI(
                    thrift_port, thrift_ip=thrift_ip, json_path=None if json_path is None else str(json_path)
                )
        except (*self._errors, SystemExit) as error:
            # bmv2's bmpy_utils.thrift_connect calls sys.exit(1) when nothing answers.
            raise ControlPlaneError(f"cannot connect to {self._where}: {printed.getvalue().strip()} {error!r}") from error
        socket_ = self._thrift_socket()
        if socket_ is not None:  # a simple_switch that stops answering is an error, not a hang
            socket_.setTimeout(THRIFT_TIMEOUT_S * 1000)

    def _transport(self) -> Any:
        """The one buffered transport bmpy_utils builds every client on (None if Thrift's
        layout differs: the lookups tolerate it rather than fail)."""
        return getattr(getattr(self._api.client, "_iprot", None), "trans", None)

    def _thrift_socket(self) -> Any:
        """The TSocket under that transport (a name-mangled attribute of TBufferedTransport)."""
        return getattr(self._transport(), "_TBufferedTransport__trans", None)

    def _call(self, method: str, *args: Any) -> Any:
        """Run one p4-utils method with its exceptions intact and its printing logged."""
        function = getattr(type(self._api), method)
        function = getattr(function, "__wrapped__", function)
        printed = io.StringIO()
        try:
            with STDOUT_CAPTURE, contextlib.redirect_stdout(printed):
                return function(self._api, *args)
        except self._errors as error:
            raise ControlPlaneError(f"{self._where}: {method}{args} failed: {error!r} {error}") from error
        finally:
            if printed.getvalue():
                log.debug("p4utils %s: %s", method, printed.getvalue().strip())

    @staticmethod
    def _refused_with(error: ControlPlaneError, exception: str, code: str) -> bool:
        """Whether bmv2 refused with this Thrift exception and error code (by name).

        The code enum sits beside the exception in its ttypes module, which for multicast
        is whichever replication engine (simple_pre, simple_pre_lag) p4-utils talks to.
        """
        cause = error.__cause__
        if type(cause).__name__ != exception:
            return False
        codes = getattr(sys.modules[type(cause).__module__], THRIFT_ERROR_CODES[exception])
        return codes._VALUES_TO_NAMES.get(getattr(cause, "code", None)) == code

    def _table_sizes(self) -> dict[str, int]:
        """Each table's ``max_size`` (its P4 ``size``), which p4-utils does not keep: from the
        program the switch runs, asked over Thrift."""
        program = json.loads(self._call_thrift(self._api.client, "bm_get_config"))
        return {table["name"]: table["max_size"] for pipeline in program["pipelines"] for table in pipeline["tables"]}

    def _load_schema(self) -> ProgramSchema:
        """The compiled program's tables, registers and counters, from the JSON p4-utils loaded."""
        info = self._api.switch_info
        sizes = self._table_sizes()
        return ProgramSchema(
            tables={
                name: TableSchema(
                    keys=tuple(Field(key, bits) for key, _match, bits in table.key),
                    actions={
                        action.rsplit(".", 1)[-1]: tuple(Field(param, bits) for param, bits in spec.runtime_data)
                        for action, spec in table.actions.items()
                    },
                    size=sizes[name],
                )
                for name, table in info.tables.items()
            },
            registers={name: RegisterSchema(r.size, r.width) for name, r in info.register_arrays.items()},
            counters={name: c.size for name, c in info.counter_arrays.items()},
        )

    def _multicast_groups(self) -> set[int]:
        """Groups the packet replication engine holds now (asked, so that any client agrees)."""
        entries = json.loads(self._call_thrift(self._api.mc_client, "bm_mc_get_entries", 0))
        return {group["id"] for group in entries["mgrps"]}

    def _table_num_entries(self, table: str) -> int:
        return int(self._call("table_num_entries", table))

    def _call_thrift(self, client: Any, method: str, *args: Any) -> Any:
        """A Thrift call p4-utils does not wrap, with the same error handling as ``_call``."""
        try:
            return getattr(client, method)(*args)
        except self._errors as error:
            raise ControlPlaneError(f"{self._where}: {method}{args} failed: {error!r}") from error

    def _table_add(
        self, table: str, action: str, keys: Sequence[MatchValue], action_params: Sequence[MatchValue]
    ) -> int:
        try:
            handle = self._call(
                "table_add", table, action, [_as_api_argument(k) for k in keys], [_as_api_argument(p) for p in action_params]
            )
        except ControlPlaneError as error:
            if self._refused_with(error, "InvalidTableOperation", "DUPLICATE_ENTRY"):
                raise duplicate_entry_error(table, keys) from error
            if self._refused_with(error, "InvalidTableOperation", "TABLE_FULL"):
                raise table_full_error(table, self._table(table).size) from error
            raise
        if not isinstance(handle, int):  # p4-utils returns bmv2's answer as is when it is not a handle
            raise ControlPlaneError(f"{self._where}: table_add {table} {action} returned {handle!r}, not a handle")
        return handle

    def _table_set_default(self, table: str, action: str, action_params: Sequence[MatchValue]) -> None:
        self._call("table_set_default", table, action, [_as_api_argument(p) for p in action_params])

    def _table_clear(self, table: str) -> None:
        self._call("table_clear", table)

    def _mc_mgrp_create(self, group: int) -> None:
        if group in self._multicast_groups():  # bmv2 itself would accept the group twice
            raise mc_group_exists_error(group)
        self._call("mc_mgrp_create", group)

    def _mc_node_create(self, rid: int, ports: Sequence[int]) -> int:
        return int(self._call("mc_node_create", rid, list(ports)))

    def _mc_node_associate(self, group: int, node_handle: int) -> None:
        try:
            self._call("mc_node_associate", group, node_handle)
        except ControlPlaneError as error:
            if self._refused_with(error, "InvalidMcOperation", "INVALID_MGRP_HANDLE"):
                raise mc_group_missing_error(group) from error
            if self._refused_with(error, "InvalidMcOperation", "INVALID_L1_HANDLE"):
                raise mc_node_missing_error(node_handle) from error
            raise

    def learning_set_buffer_size(self, list_id: int, samples: int) -> None:
        """Send a learn list's digest once it holds this many samples (or its timeout passed)."""
        self._call_thrift(self._api.client, "bm_learning_set_buffer_size", 0, list_id, samples)

    def learning_ack_buffer(self, context_id: int, list_id: int, buffer_id: int) -> None:
        """Acknowledge one learning digest buffer, so bmv2 may send its samples again if needed."""
        self._call_thrift(self._api.client, "bm_learning_ack_buffer", context_id, list_id, buffer_id)

    def counter_add(self, counter: str, index: int, byte_count: int) -> None:
        """Count one packet of ``byte_count`` bytes in a counter cell, from the control plane:
        the learning controller's EV_L2_NOT_LEARNED, which only it can see (bmv2 tells the
        data plane nothing about a full table). The data plane never counts that cell, so
        reading and writing it back loses nothing but a reset made in between."""
        self._record("counter_add", counter, index, byte_count)
        self._counter(counter)
        byte_total, packets = self._call("counter_read", counter, index)
        self._call("counter_write", counter, index, packets + 1, byte_total + byte_count)

    def _register_read(self, register: str) -> list[int]:
        return list(self._call("register_read", register))

    def _register_write(self, register: str, index: int, value: int) -> None:
        self._call("register_write", register, index, value)

    def _register_reset(self, register: str) -> None:
        self._call("register_reset", register)

    def _registers_reset(self, registers: Sequence[str]) -> None:
        """Register by register, as bmv2 resets them, with the ingress closed meanwhile.

        An update that arrived between two of the per-register calls found its cell half
        reset: one between the reset of ``count`` and that of ``seq`` opened a version
        whose seq was then zeroed under it, and every later update of that slot was
        dropped as stale. So the drop simulator's ingress threshold (step 1 of the
        pipeline, before any register is read) is raised above every draw first: each
        packet is dropped and counted (EV_DROP_SIM_INGRESS) until the reset is done and
        the threshold is back to what it was; a packet past step 1 when the gate shut has
        INGRESS_DRAIN_S to leave the pipeline. Their senders resend them, as after a loss.
        The embedded and eBPF switches reset a cell at a time under the lock their
        pipelines take, so they need no gate. SwitchML's and ATP's programs both have the
        drop simulator (switches/drop_simulator.py) first in their ingress; a program
        without one would have its registers reset one after the other, while no job sends."""
        gates = [name for name in self.schema.registers if name.endswith(f".{INGRESS_DROP_THRESHOLD}")]
        if not gates:
            super()._registers_reset(registers)
            return
        [gate] = gates
        threshold = self.register_read(gate, 0)
        self.register_write(gate, 0, INGRESS_CLOSED)
        try:
            time.sleep(INGRESS_DRAIN_S)
            super()._registers_reset(registers)
        finally:
            self.register_write(gate, 0, threshold)

    def _counter_read(self, counter: str) -> list[tuple[int, int]]:
        # p4-utils reads one cell per call and answers (bytes, packets); the interface
        # wants (packets, bytes) for the whole array, whose size p4-utils knows from the JSON.
        size = self._call("get_res", "counter", counter, self._res_type.counter_array).size
        cells = [self._call("counter_read", counter, index) for index in range(size)]
        return [(packets, byte_count) for byte_count, packets in cells]

    def _counter_reset(self, counter: str) -> None:
        self._call("counter_reset", counter)

    def close(self) -> None:
        """Close the Thrift socket p4-utils opened; it offers no close() of its own.

        bmpy_utils builds every client on one transport (``_transport``).
        """
        transport = self._transport()
        if transport is not None:
            transport.close()
