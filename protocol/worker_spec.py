"""The worker spec: what the runner (experiments/) tells every worker process (hosts/).

The runner writes one spec per method as JSON next to the workers' inputs; each worker
(``python -m hosts.worker SPEC.json --rank R``) reads it back. Both sides use these types,
so a key the runner writes and the worker expects is named once, and a spec that lacks one
fails as the spec is read, naming the key, not deep inside a method.
"""

from __future__ import annotations

import json
import signal
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping

STACKS_SIGNAL = signal.SIGUSR1
"""The signal on which a worker writes every thread's Python stack to its log (faulthandler):
the runner sends it to a rank that does not exit when told, and shows where it hangs."""


@dataclass(frozen=True)
class SwitchMLParameters:
    """The config's ``protocol`` section as one job uses it."""

    k: int
    pool_size: int
    job_id: int
    timeout_ms: float
    """Retransmission timeout floor (hosts/allreduce.py raises it on slow links)."""
    backoff_every: int
    data_path: str = "auto"
    """The worker's loop: native, python, or auto (hosts/switchml/native); the runner writes
    the one it resolved, so every worker of a run uses the same."""
    fixed_timeout_ms: float | None = None
    """A fixed retransmission timeout instead of the adaptive one (loss-free links)."""

    @classmethod
    def from_config(cls, protocol: Mapping[str, Any], data_path: str | None = None) -> SwitchMLParameters:
        """``data_path``: the runner's resolution of the config's choice (default: the choice)."""
        return cls(k=protocol["k"], pool_size=protocol["pool_size"], job_id=protocol["job_id"],
                   timeout_ms=protocol["timeout_ms"], backoff_every=protocol["backoff_every"],
                   data_path=data_path or protocol.get("data_path", "auto"), fixed_timeout_ms=protocol.get("fixed_timeout_ms"))


def job_section(parameters: Any) -> dict[str, Any]:
    """A protocol's job parameters (a dataclass or a mapping) as the spec's ``protocol``: a copy, plain data."""
    return dict(parameters) if isinstance(parameters, Mapping) else asdict(parameters)


@dataclass(frozen=True)
class TrainingSection:
    """A training workload: its settings and the data set file."""

    config: dict[str, Any]
    dataset: str


@dataclass(frozen=True)
class WorkerSpec:
    method: str
    n_workers: int
    switch_ipv4: str
    """The aggregating switch's virtual address (SwitchML's destination)."""
    link_mbps: float | None
    """The slowest shaped link (None: unshaped), which the retransmission timer drains a pool at."""
    protocol: dict[str, Any] | None
    """The switch job's parameters of an in-network method, as its protocol's record gives
    them (methods/aggregation.py), as plain data: the protocol's host code reads them into its
    own type (SwitchML: ``SwitchMLParameters(**spec.protocol)``). None for a method with no switch job."""
    peers: tuple[tuple[str, int], ...]
    """(address, TCP port) of every rank, for the baselines' connections."""
    job_timeout_s: float
    connect_timeout_s: float
    serve: str = "hosts.worker:serve"
    """"module:function" of the loop the worker runs: its workload's host loop (workloads/kinds/)."""
    inputs: tuple[str, ...] = ()
    """One tensor file (.npy) per rank; empty for training, whose workers compute gradients."""
    training: TrainingSection | None = None
    script: tuple[str, ...] = ()
    """A user's DDP script and its arguments (workload kind ddp_script), as every rank runs it."""
    workload: dict[str, Any] | None = None
    """The workload's config section, for a rank program that makes each job's tensor itself
    (``layers``: hosts/layer_jobs.py), so that no process holds a whole iteration's tensors."""
    servers: tuple[str, ...] = ()
    """IPv4 of each host besides the workers the job's protocol needs (its record's
    ``servers_per_job``, attached to the aggregating switch: ATP's parameter server), in order."""

    def __post_init__(self) -> None:
        if self.protocol is not None and not isinstance(self.protocol, dict):  # a protocol's typed parameters, as plain data
            object.__setattr__(self, "protocol", job_section(self.protocol))

    def files_read(self, rank: int) -> list[Path]:
        """The files ``rank``'s worker reads besides its spec: its tensor, the training's data
        set, or the user's script (copied to the same paths on a host of another server)."""
        return [Path(p) for p in (self.inputs[rank:rank + 1] if self.inputs else ())] + (
            [Path(self.training.dataset)] if self.training is not None else []) + [Path(p) for p in self.script[:1]]

    def with_job(self, n_workers: int, job_id: int, pool_size: int) -> WorkerSpec:
        """The same spec for one of several jobs sharing the switch."""
        if self.protocol is None:
            raise ValueError(f"method {self.method}'s spec has no protocol section: it runs no job on the switch")
        return replace(self, n_workers=n_workers, protocol={**self.protocol, "job_id": job_id, "pool_size": pool_size})

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps(asdict(self), indent=1))
        return path

    @classmethod
    def read(cls, path: Path) -> WorkerSpec:
        data = json.loads(path.read_text())
        try:
            training = data.pop("training", None)
            return cls(
                **{**data, "protocol": None if data["protocol"] is None else job_section(data["protocol"]),
                   "peers": tuple((host, int(port)) for host, port in data["peers"]), "inputs": tuple(data.get("inputs", ())),
                   "script": tuple(data.get("script", ())), "servers": tuple(data.get("servers", ())),
                   "training": None if training is None else TrainingSection(**training)}
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a worker spec ({exc})") from None
