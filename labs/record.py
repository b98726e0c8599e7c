"""The grade of record: outputs computed in the sandbox, compared with the reference's outside it.

A graded test's verdict cannot come from a process the submission's code runs in: code
imported there can rewrite the report, register a hook that passes every test or exit
before anything fails. So an instructor's grade does not ask the tests whether they passed.
For each test with ``calls`` in lab.yaml, the sandbox runs labs/harness.py, which makes the
calls with the submission's code and writes their outputs (values, never verdicts); the
same calls are made once with the reference's code (the instructor's fork, at its commit);
a test passes when every output of the submission equals the reference's. The calls get
opaque ids: no test's name, file or expected value enters the sandbox, only the inputs
the submission's code must be called with.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from labs import sandbox
from labs.catalog import Call, GradedTest
from labs.scratch import scratch_folder
from labs.text import shown
from switches.target import Toolchain

CALLS, OUTPUTS = "calls.json", "outputs.jsonl"
MAX_OUTPUTS_BYTES = 16 << 20
"""More output than this from the harness is not read: its calls fail."""
IN_PLACE_TIMEOUT_S = 120.0
"""The calls of one lab, run without the sandbox (no cap but this)."""
ABSOLUTE_TOLERANCE = 1e-12
"""A float output within this of a reference's 0.0 equals it."""


@dataclass(frozen=True)
class Computed:
    """What one sandboxed run of the harness gave: an output per call id it reached."""

    outputs: dict[str, Any]
    outcome: sandbox.Outcome


def numbered(tests: Iterable[GradedTest]) -> list[tuple[str, GradedTest, Call]]:
    """Every call of ``tests`` with its opaque id, in order."""
    calls = [(test, call) for test in tests for call in test.calls]
    return [(f"c{i}", test, call) for i, (test, call) in enumerate(calls)]


def compute(tree: Path, calls: list[tuple[str, GradedTest, Call]], limits: sandbox.Limits | None, toolchain: Toolchain) -> Computed:
    """Run the harness on ``calls`` with ``tree``'s code (a clean tree with a submission's
    or the reference's graded files) in the sandbox; without ``limits``, as a plain child
    of the grader (the lab's own checks of its calls, tests/test_labs.py)."""
    with scratch_folder("labs-record-") as scratch:
        out = scratch / "out"
        out.mkdir()
        (out / CALLS).write_text(json.dumps([{"id": id_, "function": call.function, "args": list(call.args),
                                              "kwargs": dict(call.kwargs)} for id_, _, call in calls]))  # fmt: skip
        if limits is None:
            command = [sys.executable, "-m", "labs.harness", str(out / CALLS), str(out / OUTPUTS)]
            ran = subprocess.run(command, cwd=tree, env={**os.environ, "PYTHONPATH": str(tree), "PYTHONDONTWRITEBYTECODE": "1"},
                                 capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=IN_PLACE_TIMEOUT_S)  # fmt: skip
            outcome = sandbox.Outcome(ran.returncode, ran.stdout + ran.stderr, False)
        else:
            os.chown(out, sandbox.SANDBOX_ID, sandbox.SANDBOX_ID)
            (scratch / "root").mkdir()
            command = [sys.executable, "-m", "labs.harness", str(sandbox.OUT / CALLS), str(sandbox.OUT / OUTPUTS)]
            outcome = sandbox.run(command, root=scratch / "root", tree=tree, out=out, limits=limits, toolchain=toolchain)
        return Computed(read_outputs(sandbox.read_private_file(out / OUTPUTS, MAX_OUTPUTS_BYTES) or b""), outcome)


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def read_outputs(data: bytes) -> dict[str, Any]:
    """The first output of each call id in the harness's JSON lines; a line that is not
    strict JSON of the right shape is skipped (its call then has no output)."""
    outputs: dict[str, Any] = {}
    for line in data.splitlines():
        try:
            record = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError):
            continue
        if isinstance(record, dict) and isinstance(record.get("call"), str) and "output" in record:
            outputs.setdefault(record["call"], record["output"])
    return outputs


def difference(expected: Any, got: Any, rel: float, where: str = "") -> str | None:
    """Where ``got`` first differs from ``expected`` and how, or None when they are equal
    (floats within ``rel``; an exception by its type)."""
    if isinstance(expected, dict) and "raises" in expected:
        if isinstance(got, dict) and got.get("raises") == expected["raises"]:
            return None
        return f"raised {_value(got.get('raises'))}, the reference raises {expected['raises']}" if _raised(got) else \
            f"returned, the reference raises {expected['raises']}"  # fmt: skip
    if _raised(got):
        message = got.get("message")
        return f"raised {_value(got['raises'])}" + (f": {_value(message)}" if isinstance(message, str) and message else "")
    if _number(expected) and _number(got):
        if math.isclose(expected, got, rel_tol=rel, abs_tol=ABSOLUTE_TOLERANCE):
            return None
        return f"{where or 'the value'} is {got!r}, the reference's {expected!r}"
    if isinstance(expected, dict) and isinstance(got, dict):
        for key in expected:
            if key not in got:
                return f"{where or 'the output'} has no {key!r}"
            found = difference(expected[key], got[key], rel, f"{where}[{key!r}]" if where else key)
            if found:
                return found
        extra = sorted(set(got) - set(expected))
        return f"{where or 'the output'} has {_value(extra[0])} too" if extra else None
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return f"{where or 'the value'} has {len(got)} items, the reference's {len(expected)}"
        for index, (one, other) in enumerate(zip(expected, got)):
            found = difference(one, other, rel, f"{where}[{index}]")
            if found:
                return found
        return None
    if type(expected) is type(got) and expected == got:
        return None
    return f"{where or 'the value'} is {_value(got)}, the reference's {_value(expected)}"


def _raised(output: Any) -> bool:
    return isinstance(output, dict) and "raises" in output


BROKEN_CODE = frozenset({"ImportError", "ModuleNotFoundError", "NameError", "SyntaxError"})
"""Exceptions no lab asks a student to raise: from the reference, they mean its code is broken."""


def raised_as_broken(output: Any) -> bool:
    """Whether a reference's ``output`` is one of BROKEN_CODE's exceptions."""
    return _raised(output) and output["raises"] in BROKEN_CODE


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _value(value: Any) -> str:
    return shown(json.dumps(value)[:120] if not isinstance(value, str) else value[:120])


def call_text(call: Call) -> str:
    """``module.function(arg, ...)``, as a failure's line names it (arrays shortened)."""
    args = [json.dumps(arg)[:40] for arg in call.args] + [f"{key}={json.dumps(value)[:40]}" for key, value in call.kwargs]
    return f"{call.function.rsplit('.', 1)[-1]}({', '.join(args)})"


def verdict(test: GradedTest, calls: list[tuple[str, GradedTest, Call]], expected: dict[str, Any], got: Computed,
            why_not_run: str) -> tuple[str, str]:  # fmt: skip
    """``test``'s outcome and first line: pass when each of its calls' outputs equals the
    reference's; 'not run' when the harness reached none of them."""
    mine = [(id_, call) for id_, owner, call in calls if owner is test]
    if not any(id_ in got.outputs for id_, _ in mine):
        return "not run", why_not_run
    for id_, call in mine:
        if id_ not in got.outputs:
            return "error", f"{call_text(call)}: no output (the harness stopped before it)"
        found = difference(expected[id_], got.outputs[id_], test.rel)
        if found:
            return "fail", shown(f"{call_text(call)}: {found}")
    return "pass", ""
