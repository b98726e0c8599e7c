"""The testbed's torch.distributed backends: each in-network protocol's (its record's
``torch_backend``, methods/aggregation.py) sends float32 and int32 SUM all-reduces through the
switch, everything else through Gloo over the same links.

Registered at torch's documented extension point for third-party process groups,
``torch.distributed.Backend.register_backend`` (``register``), so a script's
``dist.init_process_group(<backend>)`` builds a ``SwitchProcessGroup``: a Python
``dist.ProcessGroup`` whose methods torch's C++ side (DDP's reducer, ``dist.all_reduce``,
``dist.barrier``, ...) calls like those of a built-in backend. Nothing here knows a
protocol: each rank's client of the switch is its record's ``client``
(methods/aggregation.py), a ``SwitchClient``.

- ``allreduce`` of one dense CPU float32 or int32 tensor with ``ReduceOp.SUM`` goes to this
  rank's ``SwitchQueue``: one thread that runs the client's all-reduces one after the other,
  in the order they were asked for, which is the same on every rank (torch requires every
  rank to issue its collectives in the same order, and an in-network job's workers must
  make the same sequence of calls: their packets' sequence numbers continue from call to
  call). The call returns at once
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

Only the first group a process builds gets the switch (the switch's job spans the whole
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
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist

from hosts.stats import JobStats, added
import methods
from base.plugin import resolve
from hosts.allreduce import Unsummable
from protocol.worker_spec import WorkerSpec

log = logging.getLogger(__name__)

SWITCH_BACKENDS = tuple(protocol.torch_backend for protocol in methods.AGGREGATIONS if protocol.torch_backend is not None)
"""The backends through the switch, as ``init_process_group`` names them: each in-network
aggregation protocol's (its record's ``torch_backend``, methods/aggregation.py)."""
TESTBED_GLOO = "testbed_gloo"
"""Gloo for every call, its float32 SUM all-reduces recorded for verification."""
SWITCH_DTYPES = (torch.float32, torch.int32)
"""What the switch sums: float32 quantized by the protocol's client, int32 as is."""
RECORDED_BYTES = 16 * 1024 * 1024
"""The most recent all-reduces kept for verification, up to this many input bytes (at least
one). Every rank makes the same calls with the same sizes, so every rank keeps the same ones."""

class SwitchResult(Protocol):
    """One all-reduce's result as a protocol's client returns it."""

    values: np.ndarray
    """The sum: dequantized float32, or int32."""
    int_sum: np.ndarray | None
    """The switch's integer sum, for exact verification."""
    stats: JobStats


class SwitchClient(Protocol):
    """A rank's client of the switch, as the queue drives it: one for the rank's whole job, which
    spans every all-reduce of the training (its protocol record's ``client`` builds it)."""

    def allreduce(self, array: np.ndarray) -> SwitchResult:
        """``array``'s sum over the ranks. A tensor the switch cannot carry raises ``Unsummable``
        (hosts/allreduce.py) on every rank at the same call, which then takes Gloo's IEEE sum;
        any other error fails this rank's job, and the queue tells the other ranks."""
        ...

    def flushed(self, inputs: np.ndarray, result: Any) -> int:
        """How many nonzero elements of ``inputs`` the result's quantization lost to 0."""
        ...

    def close(self) -> None: ...


ClientFactory = Callable[[int, int], SwitchClient]
"""(rank, world size) -> this rank's client of the switch."""


def switch_client(spec: WorkerSpec, rank: int) -> SwitchClient:
    """Rank ``rank``'s client of the switch for the spec's method: its protocol record's ``client``."""
    protocol = methods.by_name(spec.method).aggregation
    if protocol is None or protocol.client is None:
        raise ValueError(f"method {spec.method} all-reduces through no switch (methods/aggregation.py: client)")
    return resolve(protocol.client)(spec, rank)
WATCH_INTERVAL_S = 0.25
"""While an all-reduce through the switch is pending, how often a rank looks for another
rank's failure in the process group's store (``FailureBoard``): the bound on how late a
rank learns that the job it waits in will never complete."""


@dataclass(frozen=True)
class Reduction:
    """One SUM all-reduce the testbed verifies: this rank's input and the sum it got."""

    inputs: np.ndarray
    values: np.ndarray
    """Through the switch: the dequantized float32 sum (or the int32 sum); Gloo: Gloo's sum."""
    seconds: float
    """From the call to its result (queueing behind earlier calls included)."""
    int_sum: np.ndarray | None = None
    """Through the switch: its int32 sum of every rank's quantized inputs."""
    stats: JobStats | None = None
    """Through the switch: the client's statistics of the job."""


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
        self.unsummable = 0
        """Sums the switch could not carry (an inf, a NaN, a value beyond what the protocol's
        integers carry, on some rank: ``Unsummable``), which
        took Gloo's IEEE sum instead: neither counted in ``calls`` nor kept."""
        self.flushed = 0
        """This rank's nonzero float32 inputs that the protocol's quantization rounded to 0,
        over every sum through the switch (its client's ``flushed``)."""
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

    def spent(self, stats: JobStats) -> None:
        """A switch job that summed nothing usable (an unsummable tensor's) still used the network."""
        with self._lock:
            self.stats = added(self.stats, stats)

    def kept(self) -> list[Reduction]:
        """The most recent reductions, oldest call first (only those that completed)."""
        with self._lock:
            return [pending.reduction for pending in self._kept if pending.reduction is not None]


class AllReduceFailed(RuntimeError):
    """A rank's all-reduce through the switch failed, so this rank's pending and later ones
    through the switch fail too: the ranks' calls no longer pair up in the switch, and a rank
    that waited there would wait for its job's deadline."""


class IeeeSums:
    """Gloo's IEEE float sum of a tensor the switch cannot carry (``Unsummable``: an inf,
    a NaN, a value beyond the protocol's integers on some rank), on a Gloo group of its own,
    built when first needed.

    Its own group, because these calls come from the switch queue's thread: on the process
    group's Gloo group they would interleave with the script's own Gloo calls in an order
    that differs from rank to rank. Every rank needs it at the same call of its queue (the
    protocol's client told them all, ``SwitchClient.allreduce``), so they build it and sum in
    step."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        self._store, self._rank, self._size, self._timeout = store, rank, size, timeout
        self._gloo: dist.ProcessGroupGloo | None = None

    def __call__(self, array: np.ndarray) -> np.ndarray:
        if self._gloo is None:
            self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("switch-ieee/", self._store), self._rank, self._size, self._timeout)
        summed = torch.from_numpy(array.copy())
        self._gloo.allreduce([summed]).wait()
        return summed.numpy()

    def close(self) -> None:
        """Release the Gloo group now, while its store and threads are whole: left to the
        interpreter's teardown, its destructor found a thread still joinable and aborted the
        process (std::terminate, exit status -6) after the script had finished."""
        self._gloo = None


class FailureBoard:
    """Where a rank whose all-reduce through the switch failed says so, and the others look:
    one key of the process group's store (rank 0's TCPStore in a script's env:// rendezvous).
    The first failure posted stays."""

    KEY = "failed"

    def __init__(self, store: dist.Store, rank: int) -> None:
        self._store = dist.PrefixStore("switch-failure/", store)
        self._rank = rank

    def post(self, error: BaseException) -> None:
        try:
            self._store.compare_set(self.KEY, "", f"rank {self._rank}: {error}")
        except Exception as unreachable:  # the failure is raised here anyway; the others learn it from their deadline
            log.error("could not tell the other ranks of this failure: %s", unreachable)

    def posted(self) -> str | None:
        """Another rank's failure (``rank R: why``), or None; a store that no longer answers
        (rank 0, which serves it, is gone) is a failure too."""
        try:
            if not self._store.check([self.KEY]):
                return None
            return self._store.get(self.KEY).decode(errors="replace")
        except Exception as unreachable:
            return f"the process group's store does not answer ({unreachable})"


class SwitchQueue:
    """This rank's all-reduces through the switch, one at a time in the order submitted, on a thread of their own.

    The order is the callers': DDP launches its buckets in index order on every rank
    (hosts/torch_hook.py), and torch's own collectives are issued in program order. The
    thread is a daemon only as a last resort: ``close`` ends it and the client.

    A tensor the switch cannot carry reaches every rank as ``Unsummable`` at the same
    call, and takes ``ieee`` (Gloo's IEEE sum, as PyTorch promises for a SUM: GradScaler
    sees the inf on every rank); without ``ieee`` that error is the call's result on every
    rank. Any other failure fails this call and every later one on this rank, and is posted
    on the ``board``, where the other ranks' watchers find it within ``WATCH_INTERVAL_S`` and
    fail their pending calls: no rank waits in the switch for one that has stopped.
    """

    def __init__(self, client: SwitchClient, ieee: IeeeSums | None = None,
                 board: FailureBoard | None = None) -> None:
        self.client = client
        self.records = Records()
        self._ieee = ieee
        self._board = board
        self._failure: AllReduceFailed | None = None
        self._pending: set[torch.futures.Future[Reduction]] = set()
        self._changed = threading.Condition()
        """Guards ``_pending``, ``_failure`` and ``_closing``; the watcher waits on it for work."""
        self._closing = False
        self._jobs: queue.Queue[tuple[np.ndarray, Pending, float, torch.futures.Future[Reduction]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._serve, name="switch-queue", daemon=True)
        self._thread.start()
        self._watcher = threading.Thread(target=self._watch, name="switch-watch", daemon=True) if board else None
        if self._watcher is not None:
            self._watcher.start()

    def submit(self, array: np.ndarray) -> torch.futures.Future[Reduction]:
        """The future of ``array``'s all-reduce: its input and sum over the ranks (``array`` is
        read when its turn comes: the caller keeps it unchanged until the future completes)."""
        future: torch.futures.Future[Reduction] = torch.futures.Future()
        with self._changed:
            failure = self._failure
            if failure is None:
                self._pending.add(future)
                self._changed.notify_all()
        if failure is not None:
            future.set_exception(failure)
            return future
        self._jobs.put((array, self.records.reserve(array.nbytes), time.perf_counter(), future))
        return future

    def _claim(self, future: torch.futures.Future[Reduction]) -> bool:
        """Whether this thread completes ``future`` (a watcher may have failed it already)."""
        with self._changed:
            if future in self._pending:
                self._pending.discard(future)
                return True
            return False

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            array, pending, submitted, future = job
            if self._failure is not None:
                continue  # failed with the rest when the failure came
            try:
                reduction = self._allreduce(array, pending, submitted)
            except Exception as error:
                log.error("all-reduce of %d %s elements through the switch failed: %s", array.size, array.dtype, error)
                failure = AllReduceFailed(f"this rank's all-reduce of {array.size} {array.dtype} elements through the switch failed: {error}")
                self._fail(failure, error)
                if self._board is not None and not isinstance(error, Unsummable):  # every rank raises that one itself
                    self._board.post(error)
                continue
            if self._claim(future):
                future.set_result(reduction)

    def _allreduce(self, array: np.ndarray, pending: Pending, submitted: float) -> Reduction:
        inputs = array.copy()
        try:
            result = self.client.allreduce(inputs)
        except Unsummable as unsummable:
            if self._ieee is None:
                raise
            log.warning("%s: all-reduced by Gloo for the IEEE sum", unsummable)
            self.records.unsummable += 1
            self.records.spent(unsummable.stats)
            return Reduction(array, self._ieee(array), time.perf_counter() - submitted)
        reduction = Reduction(inputs, result.values, time.perf_counter() - submitted, result.int_sum, result.stats)
        self.records.flushed += self.client.flushed(inputs, result)
        self.records.fill(pending, reduction)
        return reduction

    def _fail(self, failure: AllReduceFailed, cause: BaseException | None = None) -> None:
        """Fail every pending call with ``failure`` (its cause: this rank's own error), and every later one."""
        failure.__cause__ = cause
        with self._changed:
            if self._failure is None:
                self._failure = failure
            failed, self._pending = self._pending, set()
            self._changed.notify_all()
        for future in failed:
            future.set_exception(self._failure)

    def _watch(self) -> None:
        """While calls are pending, look for another rank's failure on the board."""
        assert self._board is not None
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._closing or self._failure is not None or self._pending)
                if self._closing or self._failure is not None:
                    return
            if (posted := self._board.posted()) is not None:
                log.error("another rank's all-reduce failed (%s): failing this rank's pending ones", posted)
                self._fail(AllReduceFailed(f"all-reduce through the switch failed on {posted}"))
                return
            with self._changed:
                self._changed.wait_for(lambda: self._closing or self._failure is not None, WATCH_INTERVAL_S)

    def close(self) -> None:
        """Finish what was submitted, then end the threads and the client. After a failure, a
        job left waiting in the switch for a rank that stopped is not waited for: its thread
        (a daemon) ends with the process, and so does the client's socket it still uses."""
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        if self._watcher is not None:
            self._watcher.join(WATCH_INTERVAL_S)  # a daemon: not held up by a store that stopped answering
        self._jobs.put(None)
        self._thread.join(None if self._failure is None else WATCH_INTERVAL_S)
        if self._thread.is_alive():
            log.warning("an all-reduce still waits in the switch after the failure: left to end with the process")
            return
        if self._ieee is not None:
            self._ieee.close()
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

    def method(self: SwitchProcessGroup, *args: Any, **kwargs: Any) -> Any:
        self.fallbacks[name] += 1
        return getattr(self.gloo, gloo_name or name)(*args, **kwargs)

    method.__name__ = name
    return method


class SwitchProcessGroup(dist.ProcessGroup):
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


UNSUMMABLE = "allreduce torch.float32 SUM the switch cannot carry (Gloo's IEEE sum)"
"""How the report counts the sums the switch could not carry, beside the group's fallbacks."""


def fallback_counts(groups: list[SwitchProcessGroup]) -> Counter[str]:
    """The calls every group handed to Gloo, and the sums the switch could not carry (``UNSUMMABLE``)."""
    counts = sum((group.fallbacks for group in groups), start=Counter())
    unsummable = sum(group.switch.records.unsummable for group in groups if group.switch is not None)
    if unsummable:
        counts[UNSUMMABLE] = unsummable
    return counts


GROUPS: list[SwitchProcessGroup] = []
"""Every group the backends built in this process, first the world's (for the report)."""


def register(clients: ClientFactory) -> None:
    """Register both backends with torch; the first group built takes its switch client from ``clients``.

    Called again, it replaces the client factory (torch's registry keeps the last)."""

    def create(name: str) -> Callable[[dist.Store, int, int, timedelta], SwitchProcessGroup]:
        def creator(store: dist.Store, rank: int, size: int, timeout: timedelta) -> SwitchProcessGroup:
            switch = None
            if name in SWITCH_BACKENDS and not GROUPS:
                switch = SwitchQueue(clients(rank, size), IeeeSums(store, rank, size, timeout), FailureBoard(store, rank))
            group = SwitchProcessGroup(name, store, rank, size, timeout, switch)
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
