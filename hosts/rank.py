"""What one rank does around each all-reduce of a workload, apart from how the all-reduce runs.

A workload's hosts all-reduce one tensor per released repetition (a given tensor, or a
training step's gradient) and report what they got. ``RankProgram`` is that part, without
sockets, processes or a clock: the host loop runs it on an emulated host with a method's
worker (``serve_program``, as hosts/worker.py's and hosts/training.py's loops do), and the
simulated clock runs the same program in the runner's process with the protocol's worker
on simulated links (experiments/simulated.py). A workload names its program in its record
(``Workload.rank_program``, workloads/workload.py).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Protocol

import numpy as np

from hosts.allreduce import Method
from hosts.events import emit, emit_ready
from hosts.stats import JobStats
from protocol.worker_spec import WorkerSpec

Load = Callable[[str], np.ndarray]
"""A path in the spec -> its array (``np.load`` on a host; the runner's own arrays on the simulated clock)."""
ARRAY_KEYS = ("result", "int_sum")
"""The keys of a 'done' report that hold arrays, which a host writes beside its spec for the runner."""


class RankProgram(Protocol):
    """One rank of a workload: ``cls(spec, rank, load)``."""

    def tensor(self, repetition: int) -> np.ndarray:
        """What this rank all-reduces when ``repetition`` (a step, from 1, for a training) is released."""

    def done(self, repetition: int, values: np.ndarray, int_sum: np.ndarray | None, stats: JobStats) -> dict[str, Any]:
        """Its 'done' report of that all-reduce (hosts/worker.py lists the messages), with its
        arrays (``ARRAY_KEYS``) as arrays."""


class GivenTensor:
    """The workloads that hand every rank its tensor (synthetic, trace): the same tensor each
    repetition, its result reported whole."""

    def __init__(self, spec: WorkerSpec, rank: int, load: Load = np.load) -> None:
        self._tensor = load(spec.inputs[rank])

    def tensor(self, repetition: int) -> np.ndarray:
        return self._tensor

    def done(self, repetition: int, values: np.ndarray, int_sum: np.ndarray | None, stats: JobStats) -> dict[str, Any]:
        event: dict[str, Any] = {"event": "done", "repetition": repetition, "stats": dataclasses.asdict(stats), "result": values}
        if int_sum is not None:
            event["int_sum"] = int_sum
        return event


def commands() -> Iterator[int]:
    """The repetitions the runner releases on stdin ("go N"), until it says "exit"."""
    for line in sys.stdin:
        command = line.split()
        if command == ["exit"]:
            return
        if len(command) != 2 or command[0] != "go":
            raise ValueError(f"unexpected command from the runner: {line.strip()!r}")
        yield int(command[1])
    raise EOFError("the runner closed stdin before saying exit")


def serve_program(program: RankProgram, method: Method, released: Iterable[int], name: Callable[[int], Path]) -> None:
    """On a host: ``program`` through ``method``'s worker for each repetition ``released``,
    each report on stdout, its arrays written as ``name(repetition)`` (.npy; the integer
    sum's with ``-int``) for the runner to read."""
    try:
        emit_ready()
        for repetition in released:
            values, int_sum, stats = method.allreduce(program.tensor(repetition))
            emit(written(program.done(repetition, values, int_sum, stats), name(repetition)))
    finally:
        method.close()


def written(event: dict[str, Any], path: Path) -> dict[str, Any]:
    """``event`` with each of its arrays saved beside the spec and named by its path."""
    for key, suffix in zip(ARRAY_KEYS, ("", "-int")):
        if key in event:
            target = path.with_name(f"{path.stem}{suffix}.npy")
            np.save(target, event[key])
            event[key] = str(target)
    return event

