"""The ``switchml`` torch.distributed backend: float32 and int32 SUM all-reduces through the
switch, everything else through Gloo over the same links.

Registered at torch's documented extension point for third-party process groups,
``torch.distributed.Backend.register_backend`` (``register``), so a script's
``dist.init_process_group("switchml")`` builds a ``SwitchMLProcessGroup``: a Python
``dist.ProcessGroup`` whose methods torch's C++ side (DDP's reducer, ``dist.all_reduce``,
``dist.barrier``, ...) calls like those of a built-in backend.

- ``allreduce`` of one dense CPU float32 or int32 tensor with ``ReduceOp.SUM`` goes to this
  rank's ``SwitchQueue``: one thread that runs the SwitchML client's all-reduces one after
  the other, in the order they were asked for, which is the same on every rank (torch
  requires every rank to issue its collectives in the same order; the SwitchML library
  requires the same sequence of calls, hosts/switchml/README.md). The call returns at once
  with a work handle (``wait()``, ``get_future()``), so several tensors may be in flight:
  they queue, and the next starts the moment the previous one's last result arrives.
- Every other collective, dtype (float16, bfloat16, float64, ...) and op (AVG, MAX, ...)
  goes to a Gloo process group built on the same store, over the same emulated interface
  (GLOO_SOCKET_IFNAME), so whatever works on Gloo works here. Each such call is counted
  by name (``fallbacks``) and reported with the run, so a script that mostly falls back is
  seen to.

The same class with no switch queue is the ``testbed_gloo`` backend: every call goes to
Gloo, and the all-reduces the switch would have taken are recorded like the switch's, so
the testbed can verify a plain Gloo run of a user's script from the same records
(hosts/ddp_script.py), and the two methods' fallback counts compare.

Only the first group a process builds gets the switch (the SwitchML job spans the whole
world and the client binds the worker's one UDP port); any later group, a subgroup
included, runs everything on Gloo, counted as fallbacks.

This module imports torch: only the torch-specific modules may import it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from hosts.stats import JobStats, added
import methods
from hosts.switchml import SwitchMLClient

log = logging.getLogger(__name__)

SWITCH_BACKENDS = tuple(protocol.torch_backend for protocol in methods.AGGREGATIONS if protocol.torch_backend is not None)
"""The backends through the switch, as ``init_process_group`` names them: each in-network
aggregation protocol's (its record's ``torch_backend``, methods/aggregation.py)."""
TESTBED_GLOO = "testbed_gloo"
"""Gloo for every call, its float32 SUM all-reduces recorded for verification."""
SWITCH_DTYPES = (torch.float32, torch.int32)
"""What the switch sums (hosts/switchml/client.py): float32 quantized, int32 as is."""
RECORDED_BYTES = 16 * 1024 * 1024
"""The most recent all-reduces kept for verification, up to this many input bytes (at least
one). Every rank makes the same calls with the same sizes, so every rank keeps the same ones."""

ClientFactory = Callable[[int, int], SwitchMLClient]
"""(rank, world size) -> this rank's client of the switch."""


@dataclass(frozen=True)
class Reduction:
    """One SUM all-reduce the testbed verifies: this rank's input and the sum it got."""

    inputs: np.ndarray
    values: np.ndarray
    """SwitchML: the dequantized float32 sum (or the int32 sum); Gloo: Gloo's sum."""
    seconds: float
    """From the call to its result (queueing behind earlier calls included)."""
    int_sum: np.ndarray | None = None
    """SwitchML: the switch's int32 sum of every rank's quantized inputs."""
    stats: JobStats | None = None
    """SwitchML: the library's statistics of the job."""


class Pending:
    """A reduction's place in its group's records, taken when the call is made and filled
    when it completes: calls complete in any order (Gloo runs several on threads of its
    own), and the records must keep the order the calls were made in, which every rank
    shares, or the ranks' records would pair different all-reduces."""

    __slots__ = ("nbytes", "reduction")

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.reduction: Reduction | None = None


class Records:
    """The reductions a group made, in the order they were called: counted all, the most
    recent kept (``RECORDED_BYTES``)."""

    def __init__(self) -> None:
        self.calls = 0
        self.elements = 0
        self.seconds = 0.0
        self.stats = JobStats()
        self._kept: deque[Pending] = deque()
        self._kept_bytes = 0
        self._lock = threading.Lock()

    def reserve(self, nbytes: int) -> Pending:
        """The place of a call of ``nbytes`` of input, made now."""
        pending = Pending(nbytes)
        with self._lock:
            self._kept.append(pending)
            self._kept_bytes += nbytes
            while len(self._kept) > 1 and self._kept_bytes > RECORDED_BYTES:
                self._kept_bytes -= self._kept.popleft().nbytes
        return pending

    def fill(self, pending: Pending, reduction: Reduction) -> None:
        """The call of ``pending`` completed with ``reduction``."""
        with self._lock:
            pending.reduction = reduction
            self.calls += 1
            self.elements += reduction.inputs.size
            self.seconds += reduction.seconds
            if reduction.stats is not None:
                self.stats = added(self.stats, reduction.stats)

    def kept(self) -> list[Reduction]:
        """The most recent reductions, oldest call first (only those that completed)."""
        with self._lock:
            return [pending.reduction for pending in self._kept if pending.reduction is not None]


class SwitchQueue:
    """This rank's all-reduces through the switch, one at a time in the order submitted, on a thread of their own.

    The order is the callers': DDP launches its buckets in index order on every rank
    (hosts/torch_hook.py), and torch's own collectives are issued in program order. The
    thread is a daemon only as a last resort: ``close`` ends it and the client.
    """

    def __init__(self, client: SwitchMLClient) -> None:
        self.client = client
        self.records = Records()
        self._jobs: queue.Queue[tuple[np.ndarray, Pending, float, torch.futures.Future[Reduction]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="switchml-queue", daemon=True)
        self._thread.start()

    def submit(self, array: np.ndarray) -> torch.futures.Future[Reduction]:
        """The future of ``array``'s all-reduce: its input and sum over the ranks (``array`` is
        read when its turn comes: the caller keeps it unchanged until the future completes)."""
        future: torch.futures.Future[Reduction] = torch.futures.Future()
        self._jobs.put((array, self.records.reserve(array.nbytes), time.perf_counter(), future))
        return future

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            array, pending, submitted, future = job
            try:
                inputs = array.copy()
                result = self.client.allreduce(inputs)
            except Exception as error:  # the caller's wait() raises it
                log.error("SwitchML all-reduce of %d %s elements failed: %s", array.size, array.dtype, error)
                future.set_exception(error)
                continue
            reduction = Reduction(inputs, result.values, time.perf_counter() - submitted, result.int_sum, result.stats)
            self.records.fill(pending, reduction)
            future.set_result(reduction)

    def close(self) -> None:
        """Finish what was submitted, then end the thread and the client."""
        self._jobs.put(None)
        self._thread.join()
        self.client.close()


class FutureWork(dist._Work):
    """A work handle over a torch Future of the call's output tensors, as torch's C++ side expects of a backend's work."""

    def __init__(self, future: torch.futures.Future[list[torch.Tensor]]) -> None:
        super().__init__()
        self._future = future

    def wait(self, timeout: timedelta | None = None) -> bool:
        self._future.wait()
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def get_future(self) -> torch.futures.Future[list[torch.Tensor]]:
        return self._future


def _falls_back(name: str, gloo_name: str | None = None) -> Callable[..., Any]:
    """A ProcessGroup method that hands its call to the Gloo group unchanged, counted."""

    def method(self: SwitchMLProcessGroup, *args: Any, **kwargs: Any) -> Any:
        self.fallbacks[name] += 1
        return getattr(self.gloo, gloo_name or name)(*args, **kwargs)

    method.__name__ = name
    return method


class SwitchMLProcessGroup(dist.ProcessGroup):
    """A torch.distributed process group: SUM all-reduces of float32/int32 through the
    switch when it has a ``switch`` queue, everything else through its Gloo group.

    The methods are those torch's Python process groups implement (PyProcessGroup's):
    ``allreduce`` decides; the rest fall back as they are."""

    def __init__(self, name: str, store: dist.Store, rank: int, size: int, timeout: timedelta,
                 switch: SwitchQueue | None) -> None:
        super().__init__(rank, size)
        self.name = name
        self.gloo = dist.ProcessGroupGloo(dist.PrefixStore("gloo/", store), rank, size, timeout)
        self.switch = switch
        self.records = switch.records if switch is not None else Records()
        self.fallbacks: Counter[str] = Counter()
        """Calls handed to Gloo, by collective (and dtype and op, for all-reduces)."""

    def getBackendName(self) -> str:
        return self.name

    def allreduce(self, tensors: list[torch.Tensor], opts: dist.AllreduceOptions = dist.AllreduceOptions()) -> dist.Work:
        tensor = tensors[0]
        summed = len(tensors) == 1 and opts.reduceOp == dist.ReduceOp.SUM and tensor.dtype in SWITCH_DTYPES
        summed = summed and tensor.device.type == "cpu" and tensor.layout == torch.strided and tensor.is_contiguous()
        if summed and self.switch is not None:
            return self._through_switch(tensor)
        if summed and self.name == TESTBED_GLOO:  # Gloo is this method's all-reduce, not a fallback
            return self._recorded_gloo(tensor, opts)
        self.fallbacks[f"allreduce {tensor.dtype} {op_name(opts.reduceOp)}" if len(tensors) == 1 else "allreduce of several tensors"] += 1
        return self.gloo.allreduce(tensors, opts)

    def _through_switch(self, tensor: torch.Tensor) -> dist.Work:
        assert self.switch is not None
        flat = tensor.detach().view(-1)

        def summed(future: torch.futures.Future[Reduction]) -> list[torch.Tensor]:
            flat.copy_(torch.from_numpy(np.asarray(future.value().values, dtype=flat.numpy().dtype)))
            return [tensor]

        return FutureWork(self.switch.submit(flat.numpy()).then(summed))

    def _recorded_gloo(self, tensor: torch.Tensor, opts: dist.AllreduceOptions) -> dist.Work:
        """Gloo's all-reduce, its input and sum recorded when it completes."""
        inputs, started = tensor.detach().numpy().copy().reshape(-1), time.perf_counter()
        pending = self.records.reserve(inputs.nbytes)
        work = self.gloo.allreduce([tensor], opts)

        def recorded(future: torch.futures.Future[list[torch.Tensor]]) -> list[torch.Tensor]:
            result = future.value()
            self.records.fill(pending, Reduction(inputs, result[0].detach().numpy().copy().reshape(-1), time.perf_counter() - started))
            return result

        return FutureWork(work.get_future().then(recorded))

    broadcast = _falls_back("broadcast")
    allgather = _falls_back("allgather")
    all_gather_single = _falls_back("all_gather_single", "_allgather_base")
    allreduce_coalesced = _falls_back("allreduce_coalesced")
    alltoall = _falls_back("alltoall")
    barrier = _falls_back("barrier")
    gather = _falls_back("gather")
    reduce = _falls_back("reduce")
    reduce_scatter = _falls_back("reduce_scatter")
    reduce_scatter_single = _falls_back("reduce_scatter_single", "_reduce_scatter_base")
    scatter = _falls_back("scatter")
    send = _falls_back("send")
    recv = _falls_back("recv")
    recvAnysource = _falls_back("recvAnysource", "recv_anysource")


def op_name(op: dist.ReduceOp) -> str:
    """SUM, AVG, MAX, ... for the fallback counts."""
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        if op == getattr(dist.ReduceOp, name):
            return name
    return str(op)


GROUPS: list[SwitchMLProcessGroup] = []
"""Every group the backends built in this process, first the world's (for the report)."""


def register(clients: ClientFactory) -> None:
    """Register both backends with torch; the first group built takes its switch client from ``clients``.

    Called again, it replaces the client factory (torch's registry keeps the last)."""

    def create(name: str) -> Callable[[dist.Store, int, int, timedelta], SwitchMLProcessGroup]:
        def creator(store: dist.Store, rank: int, size: int, timeout: timedelta) -> SwitchMLProcessGroup:
            switch = SwitchQueue(clients(rank, size)) if name in SWITCH_BACKENDS and not GROUPS else None
            group = SwitchMLProcessGroup(name, store, rank, size, timeout, switch)
            GROUPS.append(group)
            log.info("rank %d of %d: a %s process group%s", rank, size, name, "" if switch or name not in SWITCH_BACKENDS else " (all on Gloo: not the first group)")
            return group

        return creator

    for name in (*SWITCH_BACKENDS, TESTBED_GLOO):
        dist.Backend.register_backend(name, create(name), devices=["cpu"])


def close_groups() -> None:
    """End every switch queue this process's groups started (their clients' sockets too)."""
    for group in GROUPS:
        if group.switch is not None:
            group.switch.close()
    GROUPS.clear()
