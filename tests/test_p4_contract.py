"""The P4 program and the Python side describe one protocol: check them against each other.

Nothing here needs p4c or bmv2. The P4 sources are read as text (comments stripped,
quoted #includes inlined) and their headers, registers, counters, tables and actions are
compared with protocol/switchml/packet.py, protocol/switchml/params.py and what switches/switchml/programming.py
actually asks a switch to do. Each check names the side that drifted.
"""

from __future__ import annotations

import importlib.util
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import pytest

from protocol import packet, params
from protocol.switchml import packet as switchml_packet, params as switchml_params
from switches import drop_simulator
from switches.switchml import programming
from switches.control import MatchValue, ProgramSchema, SwitchControl
from switches.embedded.switchml.pipeline import SwitchMLPipeline

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

P4_MAIN = switchml_params.P4_MAIN
P4_INCLUDE = switchml_params.P4_PROGRAM_DIR / "include"

# --------------------------------------------------------------------------------------
# A reader for the small subset of P4_16 the program's declarations use.


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def inline_includes(path: Path, seen: set[Path] | None = None) -> str:
    """The program as p4c's preprocessor sees it (each file once, as the include guards
    make it): quoted includes, and angle-bracket ones found in p4/switchml/include (the per-element
    code generated for constants.p4's k); <core.p4>/<v1model.p4> are left out."""
    seen = set() if seen is None else seen
    if path in seen:
        return ""
    seen.add(path)

    def include(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        target = P4_INCLUDE / name
        if match.group(2) and not target.exists():
            return ""  # p4c's own <core.p4>, <v1model.p4>
        if not target.exists():
            target = path.parent / name
        return inline_includes(target, seen)

    return re.sub(r'^\s*#include\s+(?:"([^"]+)"|<([^>]+)>)', include, strip_comments(path.read_text()), flags=re.M)


def block_after(text: str, start: int) -> str:
    """The text between the first '{' at or after ``start`` and its matching '}'."""
    open_at = text.index("{", start)
    depth = 0
    for i in range(open_at, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_at + 1 : i]
    raise ValueError("unbalanced braces")


def evaluate(expression: str) -> int:
    """A constant expression over the #defines of constants.p4 (register/counter sizes)."""
    names = re.sub(r"[A-Z_][A-Z0-9_]*", lambda m: str(switchml_params.P4_CONSTANTS[m.group(0)]), expression)
    if not re.fullmatch(r"[\d\s+*()x]+", names):
        raise ValueError(f"not a constant expression: {expression!r}")
    return int(eval(names, {"__builtins__": {}}))  # digits and + * ( ) only, checked above


def header_fields(text: str, header: str) -> list[tuple[str, int]]:
    """(name, width in bits) of a header type's fields, in order (typedefs resolved)."""
    typedefs = {name: int(width) for width, name in re.findall(r"typedef\s+bit<(\d+)>\s+(\w+)\s*;", text)}
    match = re.search(rf"\bheader\s+{header}\b", text)
    assert match, f"header {header} not found in the P4 program"
    fields = []
    for type_, name in re.findall(r"(bit<\d+>|\w+)\s+(\w+)\s*;", block_after(text, match.end())):
        width = re.fullmatch(r"bit<(\d+)>", type_)
        fields.append((name, int(width.group(1)) if width else typedefs[type_]))
    return fields


@dataclass
class Table:
    keys: list[str]
    actions: list[str]


@dataclass
class Control:
    """Declarations of one control block."""

    registers: dict[str, tuple[int, int]] = field(default_factory=dict)  # name -> (width, cells)
    counters: dict[str, int] = field(default_factory=dict)  # name -> cells
    actions: dict[str, int] = field(default_factory=dict)  # name -> number of control-plane params
    tables: dict[str, Table] = field(default_factory=dict)


def parse_control(text: str, name: str) -> Control:
    match = re.search(rf"\bcontrol\s+{name}\s*\(", text)
    assert match, f"control {name} not found in the P4 program"
    body = block_after(text, match.end())
    control = Control()
    for width, size, reg in re.findall(r"register<bit<(\d+)>>\s*\(([^;]*?)\)\s*(\w+)\s*;", body):
        control.registers[reg] = (int(width), evaluate(size))
    for size, counter in re.findall(r"\bcounter\s*\(([^,]+),\s*CounterType\.\w+\)\s*(\w+)\s*;", body):
        control.counters[counter] = evaluate(size)
    for action, parameters in re.findall(r"\baction\s+(\w+)\s*\(([^)]*)\)", body):
        control.actions[action] = len([p for p in parameters.split(",") if p.strip()])
    for table in re.finditer(r"\btable\s+(\w+)", body):
        table_body = block_after(body, table.end())
        keys = re.search(r"\bkey\s*=\s*\{([^}]*)\}", table_body)
        actions = re.search(r"\bactions\s*=\s*\{([^}]*)\}", table_body)
        assert keys and actions, f"table {table.group(1)} lacks key or actions"
        control.tables[table.group(1)] = Table(
            keys=[k.split(":")[0].strip() for k in keys.group(1).split(";") if k.strip()],
            actions=[a.strip().removesuffix("()") for a in actions.group(1).split(";") if a.strip()],
        )
    return control


PROGRAM = inline_includes(P4_MAIN)
CONTROLS = {name: parse_control(PROGRAM, name) for name in (programming.INGRESS, programming.EGRESS)}
HEADERS_P4 = inline_includes(P4_INCLUDE / "headers.p4")

# --------------------------------------------------------------------------------------
# Headers: P4 text vs protocol/switchml/packet.py


def struct_layout(fmt: struct.Struct, names: Sequence[str]) -> list[tuple[str, int]]:
    """(name, width in bits) of a big-endian struct's fields."""
    codes = re.findall(r"[a-zA-Z]", fmt.format)
    assert len(codes) == len(names), f"{fmt.format} has {len(codes)} fields, names: {names}"
    return [(name, struct.calcsize("!" + code) * 8) for name, code in zip(names, codes)]


def layout_problems(p4: list[tuple[str, int]], python: list[tuple[str, int]]) -> list[str]:
    """Differences between two field lists, position by position."""
    problems = [f"field count: P4 {len(p4)}, Python {len(python)}"] if len(p4) != len(python) else []
    problems += [
        f"field {i}: P4 {a[0]} ({a[1]} bits), Python {b[0]} ({b[1]} bits)"
        for i, (a, b) in enumerate(zip(p4, python))
        if a != b
    ]
    return problems


def test_switchml_header_matches_packet_py() -> None:
    python = struct_layout(switchml_packet.SWITCHML_HEADER, switchml_packet.SwitchMLHeader._fields)
    assert layout_problems(header_fields(HEADERS_P4, "switchml_h"), python) == []
    assert switchml_packet.SWITCHML_HEADER_BYTES * 8 == sum(w for _, w in python)


def test_layout_check_catches_drift() -> None:
    """The comparison above must notice a reordered or resized field."""
    p4 = header_fields(HEADERS_P4, "switchml_h")
    python = struct_layout(switchml_packet.SWITCHML_HEADER, switchml_packet.SwitchMLHeader._fields)
    assert layout_problems([p4[1], p4[0], *p4[2:]], python)
    assert layout_problems([*p4[:-1], (p4[-1][0], 16)], python)
    assert layout_problems(p4[:-1], python)


def test_exponent_is_the_only_signed_field() -> None:
    """switchml_h.exponent is int8 on both sides (P4 compares it via int<8> casts)."""
    signed = [n for n, c in zip(switchml_packet.SwitchMLHeader._fields, re.findall(r"[a-zA-Z]", switchml_packet.SWITCHML_HEADER.format)) if c.islower()]
    assert signed == ["exponent"]
    assert "(int<8>)hdr.switchml.exponent" in PROGRAM.replace(" ", "")


def test_data_header_has_k_int32_elements() -> None:
    fields = header_fields(HEADERS_P4, "switchml_data_h")
    assert fields == [(f"d{i:02d}", packet.ELEMENT_BYTES * 8) for i in range(switchml_params.P4_SOURCE_K)]


@pytest.mark.parametrize(
    ("header", "size"),
    [("ethernet_h", packet.ETH_HEADER_BYTES), ("ipv4_h", packet.IPV4_HEADER_BYTES), ("udp_h", packet.UDP_HEADER_BYTES)],
)
def test_outer_header_sizes(header: str, size: int) -> None:
    assert sum(width for _, width in header_fields(HEADERS_P4, header)) == size * 8


def test_frame_size_matches_udp_length_check() -> None:
    """SwitchMLIngress drops updates whose udp.length differs from SWITCHML_UDP_LENGTH."""
    define = re.search(r"#define\s+SWITCHML_UDP_LENGTH\s+(.+)", PROGRAM)
    assert define, "SWITCHML_UDP_LENGTH not defined"
    assert evaluate(define.group(1)) == packet.UDP_HEADER_BYTES + switchml_packet.payload_bytes(switchml_params.P4_SOURCE_K)


def test_results_are_cut_to_a_frame_of_k_elements() -> None:
    """SwitchMLEgress truncates every result to SWITCHML_FRAME_BYTES, the frame protocol/switchml/packet.py builds."""
    define = re.search(r"#define\s+SWITCHML_FRAME_BYTES\s+(.+)", PROGRAM)
    assert define, "SWITCHML_FRAME_BYTES not defined"
    assert evaluate(define.group(1)) == switchml_packet.frame_bytes(switchml_params.P4_SOURCE_K)
    assert re.search(r"truncate\(\(bit<32>\)SWITCHML_FRAME_BYTES\)", block_after(PROGRAM, PROGRAM.index("control SwitchMLEgress")))


# --------------------------------------------------------------------------------------
# Registers and counters


def test_value_registers_cover_k_elements() -> None:
    ingress = CONTROLS[programming.INGRESS]
    values = sorted(r for r in ingress.registers if r.startswith("value_"))
    assert values == [name.split(".")[-1] for name in programming.value_registers(switchml_params.P4_SOURCE_K)]
    assert len(values) == switchml_params.P4_SOURCE_K


def test_aggregation_registers_hold_both_shadow_sets() -> None:
    ingress = CONTROLS[programming.INGRESS]
    for qualified in programming.aggregation_registers(switchml_params.P4_SOURCE_K):
        assert ingress.registers[qualified.split(".")[-1]] == (32, 2 * switchml_params.MAX_POOL_SIZE), qualified


def test_counters_have_one_cell_per_event() -> None:
    assert CONTROLS[programming.INGRESS].counters == {"event_counter": len(switchml_params.EVENT_COUNTER_CELLS)}
    assert CONTROLS[programming.EGRESS].counters == {"egress_counter": len(switchml_params.EGRESS_EVENTS)}


THRESHOLD_FORMULA = re.compile(r"(?i:drop probability) p (?:->|as) (round\(p \* [^|:]*?\))[ :|]")
"""How docs/dataplane.md's register table and ingress.p4's comment write the drop threshold."""


@pytest.mark.parametrize("document", [params.REPO_ROOT / "docs" / "dataplane.md", P4_INCLUDE / "ingress.p4"], ids=lambda p: p.name)
def test_documented_drop_threshold_is_the_one_programmed(document: Path) -> None:
    """The threshold the text gives for drop probability p is probability_threshold(p), which
    drops with probability p: a draw is uniform over the DROP_DRAW_MAX + 1 = 2^32 - 1 values
    0..DROP_DRAW_MAX, and p = 0 must give 0 (round(p * 2^32 - 1) gave -1)."""
    formulas = THRESHOLD_FORMULA.findall(document.read_text().replace("\n", " "))
    assert formulas, f"{document}: no 'drop probability p -> round(p * ...)'"
    for formula in formulas:
        for probability in (0.0, 1e-6, 0.01, 0.5, 1.0):
            documented = eval(formula.replace("^", "**"), {"__builtins__": {}, "round": round, "p": probability})
            assert documented == drop_simulator.probability_threshold(probability), (formula, probability)
    assert drop_simulator.probability_threshold(0.0) == 0
    assert drop_simulator.probability_threshold(1.0) == drop_simulator.DROP_DRAW_MAX + 1  # above every draw


# --------------------------------------------------------------------------------------
# Everything switches/switchml/programming.py does must exist in the P4 program


class RecordingControl(SwitchControl):
    """Records the primitives programming.py calls; answers reads with zeros."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def _note(self, verb: str, *args: Any) -> None:
        self.calls.append((verb, args))

    def _load_schema(self) -> ProgramSchema:
        """The embedded switch's program: the calls are then checked against the P4 text."""
        return SwitchMLPipeline(switchml_params.P4_SOURCE_K, switchml_params.MAX_POOL_SIZE).schema()

    def _table_num_entries(self, table: str) -> int:
        self._note("table_num_entries", table)
        return 0

    def _table_add(self, table: str, action: str, keys: Sequence[MatchValue], action_params: Sequence[MatchValue]) -> int:
        self._note("table_add", table, action, tuple(keys), tuple(action_params))
        return len(self.calls)

    def _table_set_default(self, table: str, action: str, action_params: Sequence[MatchValue]) -> None:
        self._note("table_set_default", table, action, (), tuple(action_params))

    def _table_clear(self, table: str) -> None:
        self._note("table_clear", table)

    def _mc_mgrp_create(self, group: int) -> None:
        self._note("mc_mgrp_create", group)

    def _mc_node_create(self, rid: int, ports: Sequence[int]) -> int:
        self._note("mc_node_create", rid, tuple(ports))
        return len(self.calls)

    def _mc_node_associate(self, group: int, node_handle: int) -> None:
        self._note("mc_node_associate", group, node_handle)

    def _register_read(self, register: str) -> list[int]:
        self._note("register_read", register)
        return [0]

    def _register_write(self, register: str, index: int, value: int) -> None:
        self._note("register_write", register, index, value)

    def _register_reset(self, register: str) -> None:
        self._note("register_reset", register)

    def _counter_read(self, counter: str) -> list[tuple[int, int]]:
        self._note("counter_read", counter)
        return [(0, 0)] * 16

    def _counter_reset(self, counter: str) -> None:
        self._note("counter_reset", counter)

    def close(self) -> None:
        self._note("close")


def programming_calls() -> list[tuple[str, tuple[Any, ...]]]:
    """Every public operation of programming.py, run against the recorder."""
    control = RecordingControl()
    workers = [programming.WorkerPort(rank=r, switch_port=r + 1, mac=f"02:00:00:00:00:{r + 1:02x}", ipv4=f"10.0.0.{r + 1}") for r in range(2)]
    programming.program_forwarding(control, [1, 2], {w.mac: w.switch_port for w in workers})
    programming.program_aggregation(control, programming.JobProgram(job_id=1, workers=workers))
    programming.program_pass_through(control)
    programming.set_drop_probability(control, 0.01, 0.01)
    programming.reset_aggregation_state(control, switchml_params.P4_SOURCE_K)
    programming.read_event_counters(control)
    programming.reset_event_counters(control)
    return control.calls


def split(qualified: str) -> tuple[Control, str]:
    control, _, name = qualified.partition(".")
    assert control in CONTROLS, f"{qualified}: no control {control} in the P4 program"
    return CONTROLS[control], name


def name_problems(calls: list[tuple[str, tuple[Any, ...]]]) -> list[str]:
    """Every table/action/register/counter a call names, checked against the P4 program."""
    problems = []
    for verb, args in calls:
        if verb.startswith("table_"):
            control, table_name = split(str(args[0]))
            table = control.tables.get(table_name)
            if table is None:
                problems.append(f"{verb}: no table {args[0]}")
                continue
            if verb == "table_clear":
                continue
            action, keys, action_params = args[1], args[2], args[3]
            if action not in table.actions:
                problems.append(f"{verb}: {args[0]} has no action {action} (has {table.actions})")
            elif action != "NoAction" and control.actions.get(str(action)) != len(action_params):
                problems.append(f"{verb}: {action} takes {control.actions.get(str(action))} params, given {len(action_params)}")
            if verb == "table_add" and len(keys) != len(table.keys):
                problems.append(f"table_add: {args[0]} has keys {table.keys}, given {keys}")
        elif verb.startswith("register_"):
            control, register = split(str(args[0]))
            if register not in control.registers:
                problems.append(f"{verb}: no register {args[0]}")
            elif verb == "register_write" and not 0 <= args[1] < control.registers[register][1]:
                problems.append(f"register_write: index {args[1]} outside {args[0]}")
        elif verb.startswith("counter_"):
            control, counter = split(str(args[0]))
            if counter not in control.counters:
                problems.append(f"{verb}: no counter {args[0]}")
    return problems


def test_programming_names_exist_in_p4() -> None:
    calls = programming_calls()
    verbs = {verb for verb, _ in calls}
    assert {"table_add", "table_set_default", "register_write", "register_reset", "counter_read"} <= verbs
    assert name_problems(calls) == []


def test_name_check_catches_drift() -> None:
    """A renamed table, action or register, or a wrong arity, must be reported."""
    assert name_problems([("table_add", (programming.WORKER_TABLE, "set_worker", (1, "10.0.0.1"), (0, 1, 2, 2)))])
    assert name_problems([("table_add", (programming.WORKER_TABLE, "set_rank_addr", (1, "10.0.0.1"), ()))])
    assert name_problems([("table_add", (f"{programming.INGRESS}.l2_tabel", "l2_forward", ("02:00:00:00:00:01",), (1,)))])
    assert name_problems([("register_reset", (f"{programming.INGRESS}.value_{switchml_params.P4_SOURCE_K:02d}",))])
    assert name_problems([("counter_read", (f"{programming.EGRESS}.event_counter",))])


def test_table_keys_and_defaults_follow_dataplane_doc() -> None:
    """docs/dataplane.md's table list (keys and the default action last)."""
    ingress, egress = CONTROLS[programming.INGRESS], CONTROLS[programming.EGRESS]
    assert ingress.tables["worker_table"] == Table(
        ["standard_metadata.ingress_port", "hdr.ipv4.srcAddr"], ["set_worker", "forward_as_ordinary", "drop_unknown_sender"]
    )
    assert ingress.tables["l2_learn_table"] == Table(["hdr.ethernet.srcAddr"], ["NoAction", "l2_learn"])
    assert ingress.tables["l2_table"] == Table(["hdr.ethernet.dstAddr"], ["l2_forward", "l2_flood"])
    assert egress.tables["rank_addr_table"] == Table(["meta.job_id", "meta.dst_rank"], ["set_rank_addr", "drop"])
    for table, default in [
        ("worker_table", "drop_unknown_sender"),
        ("l2_learn_table", "l2_learn"),
        ("l2_table", "l2_flood"),
        ("rank_addr_table", "drop"),
    ]:
        match = re.search(rf"\btable\s+{table}\b", PROGRAM)
        assert match and re.search(rf"default_action\s*=\s*{default}\s*\(", block_after(PROGRAM, match.end())), table


# --------------------------------------------------------------------------------------
# The generated per-element code


def load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_elements", switchml_params.P4_PROGRAM_DIR / "gen_elements.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_elements_are_fresh() -> None:
    generator = load_generator()
    assert generator.stale(switchml_params.P4_SOURCE_K, P4_INCLUDE) == [], "run: python p4/switchml/gen_elements.py"


@pytest.mark.parametrize("k", switchml_params.K_CHOICES)
def test_generated_actions_touch_every_element_once(k: int) -> None:
    """store/add/read each name every value register exactly once per access kind."""
    text = strip_comments(load_generator().render_elements(k))
    for action, pattern in [
        ("store_first_values", r"value_(\d+)\.write\(meta\.reg_index, hdr\.data\.d\1\)"),
        ("add_values", r"value_(\d+)\.read\(stored, meta\.reg_index\)"),
        ("add_values", r"value_(\d+)\.write\(meta\.reg_index, hdr\.data\.d\1\)"),
        ("read_values", r"value_(\d+)\.read\(hdr\.data\.d\1, meta\.reg_index\)"),
    ]:
        body = block_after(text, text.index(f"action {action}("))
        assert [int(i) for i in re.findall(pattern, body)] == list(range(k)), (action, pattern)


@pytest.mark.parametrize("k", switchml_params.K_CHOICES)
def test_generated_data_header_has_k_int32_elements(k: int) -> None:
    text = strip_comments(load_generator().render_data_header(k))
    assert header_fields(text, "switchml_data_h") == [(f"d{i:02d}", packet.ELEMENT_BYTES * 8) for i in range(k)]
    assert re.search(rf"#define\s+SWITCHML_DATA_HEADER_K\s+{k}\b", text)


def test_generator_refuses_a_k_no_target_builds() -> None:
    with pytest.raises(ValueError, match="k must be one of"):
        load_generator().render_elements(48)
