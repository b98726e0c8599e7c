"""Compute a lab's graded calls with the tree's code and write their outputs, nothing else.

This is what an instructor's grade runs in the sandbox (labs/record.py): it reads a list
of calls (a function of the tree, by its dotted name, and its arguments), makes each call
and writes one JSON line per call with what it returned, the arrays it was given as they
are after the call (a buffer written in place) or the exception it raised. It reports
outputs, never verdicts: the grader compares them, outside the sandbox, with what the
reference's code gives for the same calls. Code of the submission runs in this process
and can write anything into the outputs; to be credited it must write the reference's
outputs for inputs it sees only here, which is solving the lab.

    python -m labs.harness CALLS.json OUTPUTS.jsonl
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import json
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

MAX_TEXT = 200
"""Characters of a string or a repr kept in an output."""


def decode(value: Any) -> Any:
    """An argument as lab.yaml writes it: ``{array: [...], dtype: ...}`` is a numpy array;
    lists and mappings hold arguments; anything else is itself."""
    if isinstance(value, dict):
        if set(value) in ({"array", "dtype"}, {"array"}):
            return np.array(value["array"], dtype=value.get("dtype"))
        return {key: decode(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode(item) for item in value]
    return value


def encode(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON that compares equal exactly when the values do: numbers, text,
    lists; an array with its dtype and shape; a dataclass or mapping by its fields; a
    float that is not finite as text (strict JSON has no NaN)."""
    if depth > 20:
        return {"type": type(value).__name__, "repr": "nested too deeply"}
    if value is None or isinstance(value, (bool, int, str)):
        return value[:MAX_TEXT] if isinstance(value, str) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": repr(value)}
    if isinstance(value, enum.Enum):
        return {"enum": f"{type(value).__name__}.{value.name}"}
    if isinstance(value, np.ndarray):
        return {"dtype": value.dtype.str, "shape": list(value.shape), "values": encode(value.tolist(), depth + 1)}
    if isinstance(value, np.generic):
        return encode(value.item(), depth + 1)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"type": type(value).__name__, **{f.name: encode(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)}}
    if isinstance(value, dict):
        return {str(key): encode(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(item, depth + 1) for item in value]
    return {"type": type(value).__name__, "repr": repr(value)[:MAX_TEXT]}


def resolve(name: str) -> Callable[..., Any]:
    """The function ``package.module.function`` (or ``module.Class.method``) of the tree."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            target: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as error:
            if error.name is not None and ".".join(parts[:cut]).startswith(error.name):
                continue
            raise
        for attribute in parts[cut:]:
            target = getattr(target, attribute)
        return target
    raise ModuleNotFoundError(f"no module in {name!r}")


def output(function: str, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What one call gives: its return value (or which argument it returned), the array
    arguments after it, or the type of what it raised (and its message, for the reader)."""
    values = [decode(arg) for arg in args]
    named = {key: decode(arg) for key, arg in kwargs.items()}
    arrays = [value for value in [*values, *named.values()] if isinstance(value, np.ndarray)]
    try:
        returned = resolve(function)(*values, **named)
    except Exception as error:  # noqa: BLE001 -- what the student's code raised is its output
        return {"raises": type(error).__name__, "message": str(error)[:MAX_TEXT]}
    same = next((i for i, array in enumerate(arrays) if returned is array), None)
    result: dict[str, Any] = {"returned": {"argument": same} if same is not None else encode(returned)}
    if arrays:
        result["arrays"] = [encode(array) for array in arrays]
    return result


def main(argv: list[str]) -> int:
    calls_path, outputs_path = argv
    with open(calls_path) as handle:
        calls = json.load(handle)
    with open(outputs_path, "w") as out:
        for call in calls:
            line = {"call": call["id"], "output": output(call["function"], call.get("args", []), call.get("kwargs", {}))}
            out.write(json.dumps(line, allow_nan=False) + "\n")
            out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
