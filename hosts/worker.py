"""The process the testbed starts on every emulated host: one rank of one method.

    python -m hosts.worker SPEC.json --rank R

The runner (experiments/workers.py) writes SPEC.json (method, peers, switch address,
protocol parameters, input file per rank) and talks to this process over stdin/stdout:

    worker -> {"event": "ready"}                 after set-up (sockets, connections)
    runner -> "go <repetition>"                  all ranks released together (a barrier)
    worker -> {"event": "done", "repetition": r, "stats": {...}, "result": "path.npy"}
    runner -> "exit"
    worker -> {"event": "error", "message": "...", "timed_out": bool} then exit status 1, on any
              failure; ``timed_out`` when an all-reduce missed its deadline (spec's job_timeout_s)

Results are written as .npy next to the spec so the runner verifies them exactly.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

import numpy as np

from hosts.stats import JobStats

if TYPE_CHECKING:
    from hosts.switchml.timers import RetransmitPolicy

log = logging.getLogger("hosts.worker")

Outcome = tuple[np.ndarray, np.ndarray | None, JobStats]
"""(result values, SwitchML's raw int32 sum or None, statistics)."""


class Method(Protocol):
    def allreduce(self, tensor: np.ndarray) -> Outcome: ...

    def close(self) -> None: ...


class SwitchMLMethod:
    """SwitchMLClient with the worker's result shape."""

    def __init__(self, spec: dict[str, Any], rank: int) -> None:
        from hosts.switchml.client import SwitchMLClient

        proto = spec["protocol"]
        self._client = SwitchMLClient(
            rank=rank,
            n_workers=spec["n_workers"],
            job_id=proto["job_id"],
            switch_ipv4=spec["switch_ipv4"],
            k=proto["k"],
            pool_size=proto["pool_size"],
            retransmit=retransmit_policy(proto, spec["link_mbps"]),
            job_deadline_s=spec["job_timeout_s"],
        )

    def allreduce(self, tensor: np.ndarray) -> Outcome:
        result = self._client.allreduce(tensor)
        return result.values, result.int_sum, result.stats

    def close(self) -> None:
        self._client.close()


def retransmit_policy(protocol: dict[str, Any], link_mbps: float | None) -> RetransmitPolicy:
    """The config's timeout floor (``timeout_ms``), raised to twice the time a full pool takes
    to cross the slowest link when links are rate-limited (hosts/switchml/timers.py: under
    loss the measured round trips fall below it just before the pool refills)."""
    from hosts.switchml.timers import RetransmitPolicy, pool_drain_s

    floor_s = protocol["timeout_ms"] / 1000.0
    if link_mbps is not None:
        floor_s = max(floor_s, 2 * pool_drain_s(protocol["pool_size"], protocol["k"], link_mbps * 1e6))
    return RetransmitPolicy(min_s=floor_s, backoff_every=protocol["backoff_every"], max_s=max(1.0, floor_s))


class BaselineMethod:
    """Ring all-reduce or parameter server over TCP between the hosts."""

    def __init__(self, spec: dict[str, Any], rank: int) -> None:
        from hosts.parameter_server import ParameterServerAllReduce
        from hosts.ring_allreduce import RingAllReduce

        cls = {"ring": RingAllReduce, "ps": ParameterServerAllReduce}[spec["method"]]
        peers = [tuple(p) for p in spec["peers"]]
        self._impl = cls(peers, rank, timeout_s=spec["job_timeout_s"], connect_timeout_s=spec["connect_timeout_s"])
        self._impl.connect()

    def allreduce(self, tensor: np.ndarray) -> Outcome:
        values, stats = self._impl.allreduce(tensor)
        return values, None, stats

    def close(self) -> None:
        self._impl.close()


METHODS: dict[str, Callable[[dict[str, Any], int], Method]] = {
    "switchml": SwitchMLMethod,
    "ring": BaselineMethod,
    "ps": BaselineMethod,
}


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def serve(spec: dict[str, Any], rank: int, out_dir: Path) -> None:
    tensor = np.load(spec["inputs"][rank])
    method = METHODS[spec["method"]](spec, rank)
    try:
        emit({"event": "ready"})
        for line in sys.stdin:
            command = line.split()
            if command == ["exit"]:
                return
            if len(command) != 2 or command[0] != "go":
                raise ValueError(f"unexpected command from the runner: {line.strip()!r}")
            repetition = int(command[1])
            values, int_sum, stats = method.allreduce(tensor)
            result_path = out_dir / f"{spec['method']}-rank{rank}-rep{repetition}.npy"
            np.save(result_path, values)
            event: dict[str, Any] = {"event": "done", "repetition": repetition, "stats": dataclasses.asdict(stats), "result": str(result_path)}
            if int_sum is not None:
                int_path = out_dir / f"{spec['method']}-rank{rank}-rep{repetition}-int.npy"
                np.save(int_path, int_sum)
                event["int_sum"] = str(int_path)
            emit(event)
        raise EOFError("the runner closed stdin before saying exit")
    finally:
        method.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("spec", type=Path)
    parser.add_argument("--rank", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s rank{args.rank} %(name)s %(levelname)s %(message)s")
    try:
        spec = json.loads(args.spec.read_text())
        if "training" in spec:  # the training workload: one SGD step per command (hosts/training.py)
            from hosts.training import serve_training

            serve_training(spec, args.rank, args.spec.parent)
        else:
            serve(spec, args.rank, args.spec.parent)
    except Exception as exc:
        log.exception("worker failed")
        emit({"event": "error", "message": f"{type(exc).__name__}: {exc}", "timed_out": isinstance(exc, TimeoutError)})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
