"""SwitchMLClient: the worker side of SwitchML all-reduce over an ordinary UDP socket.

The switch is reached at a virtual IPv4 address (the host resolves its virtual MAC by ARP:
the switch answers for it) on UDP port ``UDP_PORT_BASE``; results come back to ``WORKER_UDP_PORT`` from
that same address, so the socket is connected to the switch and the kernel filters out
everything else. The spec requires UDP checksum 0, which Linux emits with SO_NO_CHECK.

Workers of one job must make the same sequence of all-reduce calls (same lengths and
dtypes): sequence numbers and shadow sets continue from call to call, and every worker's
packet p of a job must carry the same slot, set and seq for the switch's result to match.
"""

from __future__ import annotations

import logging
import select
import socket
import time

import numpy as np

from base.linux_sockets import IP_MTU_DISCOVER, IP_PMTUDISC_PROBE
from hosts.switchml.core import BATCH_PER_POOL, SEQ_MASK, AllReduceResult, JobContext, job_result, prepare_tensor
from hosts.switchml.job import AllReduceJob
from hosts.mmsg import BatchSocket
from hosts.switchml.native import resolve
from hosts.switchml.native.job import NativeJob, NativeRoundTrip
from hosts.switchml.pool import SlotPool
from hosts.switchml.timers import RetransmitPolicy
from protocol.switchml import params
from protocol.packet import IPV4_MTU
from protocol.switchml.packet import MAX_K
from protocol.quantize import flushed_to_zero

log = logging.getLogger(__name__)

SO_NO_CHECK = 11
"""Linux SOL_SOCKET option: send UDP datagrams with checksum 0 (not exported by Python)."""
SO_RCVBUFFORCE = 33
SO_SNDBUFFORCE = 32
SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
"""Room for a full pool of results (and retransmissions) while the worker is busy."""
DEFAULT_JOB_DEADLINE_S = 60.0


def _set_buffer(sock: socket.socket, force_option: int, option: int, size: int) -> None:
    """Ask for ``size`` bytes beyond net.core.[rw]mem_max when root, else as much as allowed."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, force_option, size)
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, option, size)


class SwitchMLClient:
    """One worker of a SwitchML job; ``allreduce`` may be called any number of times."""

    def __init__(
        self,
        rank: int,
        n_workers: int,
        job_id: int,
        switch_ipv4: str,
        *,
        k: int,
        pool_size: int,
        switch_port: int = params.UDP_PORT_BASE,
        bind_ipv4: str = "0.0.0.0",
        bind_port: int = params.WORKER_UDP_PORT,
        retransmit: RetransmitPolicy = RetransmitPolicy(),
        job_deadline_s: float = DEFAULT_JOB_DEADLINE_S,
        data_path: str = "python",
    ) -> None:
        if not 1 <= n_workers <= params.MAX_WORKERS:
            raise ValueError(f"n_workers must be 1..{params.MAX_WORKERS}, got {n_workers}")
        if not 0 <= rank < n_workers:
            raise ValueError(f"rank must be 0..{n_workers - 1}, got {rank}")
        if not 0 <= job_id <= 0xFFFF:
            raise ValueError(f"job_id must fit 16 bits, got {job_id}")
        if not 1 <= k <= MAX_K:
            raise ValueError(f"k must be 1..{MAX_K} (a packet must fit the {IPV4_MTU}-byte MTU), got {k}")
        if not 1 <= pool_size <= params.MAX_POOL_SIZE:
            raise ValueError(f"pool_size must be 1..{params.MAX_POOL_SIZE}, got {pool_size}")
        if job_deadline_s <= 0:
            raise ValueError(f"job_deadline_s must be positive, got {job_deadline_s}")
        self.data_path = resolve(data_path)
        """Which implementation runs the loop (hosts/switchml/native: ``auto`` is native where it builds)."""
        self._native_rtt = NativeRoundTrip() if self.data_path.name == "native" else None
        self._ctx = JobContext(rank=rank, n_workers=n_workers, job_id=job_id, policy=retransmit, deadline_s=job_deadline_s)
        self._pool = SlotPool(pool_size, k)
        self._next_seq = 0
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, SO_NO_CHECK, 1)
            self._sock.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_PROBE)  # a forged path MTU: mmsg.ICMP_ERRNOS
            _set_buffer(self._sock, SO_RCVBUFFORCE, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES)
            _set_buffer(self._sock, SO_SNDBUFFORCE, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES)
            self._sock.bind((bind_ipv4, bind_port))
            self._sock.connect((switch_ipv4, switch_port))
            self._sock.setblocking(False)
        except OSError:
            self._sock.close()
            raise
        self._io = BatchSocket(self._sock, self._pool.packets.dtype, BATCH_PER_POOL * pool_size)
        self._poller = select.poll()
        self._poller.register(self._sock, select.POLLIN)
        log.debug("rank %d: bound %s, switch %s:%d, k=%d, pool=%d", rank, self._sock.getsockname(), switch_ipv4, switch_port, k, pool_size)

    @property
    def n_workers(self) -> int:
        return self._ctx.n_workers

    @property
    def k(self) -> int:
        """Elements per packet: the block of block floating point."""
        return self._pool.k

    @property
    def address(self) -> tuple[str, int]:
        """Local (IPv4, UDP port) the results must be sent to."""
        return self._sock.getsockname()

    @property
    def shadow_sets(self) -> list[int]:
        """Per slot: the shadow set its next packet will use (a copy)."""
        return self._pool.shadow_set.tolist()

    def reset_shadow_sets(self) -> None:
        """Start all slots at set 0; only together with the switch's reset_aggregation_state."""
        self._pool.reset_shadow_sets()

    def allreduce(self, tensor: np.ndarray) -> AllReduceResult:
        """Sum ``tensor`` (1-D float32 or int32, any length) over all workers of the job.

        float32 is quantized (protocol.quantize); a tensor with an inf, a NaN or |x| > 2^126
        on any rank raises UnsummableTensor (a ValueError) on every rank, once the job has
        completed; int32 is summed with 32-bit wrap-around. A
        tensor shorter than k * pool_size uses only ceil(len / k) slots; an empty tensor
        returns an empty result without sending anything (all workers agree on that).
        Raises SwitchMLTimeout when the job has not finished within job_deadline_s.
        """
        t0 = time.perf_counter()
        x, exponents = prepare_tensor(tensor, self._pool.k)
        if self._native_rtt is not None:
            job: AllReduceJob | NativeJob = NativeJob(self._io, self._pool, self._ctx, self._native_rtt, x, exponents,
                                                      self._next_seq, t0, self._sock.fileno())
        else:
            job = AllReduceJob(self._io, self._poller, self._pool, self._ctx, x, exponents, self._next_seq, t0)
        self._next_seq = (self._next_seq + job.total_packets) & SEQ_MASK
        if len(x):
            job.run()
        result = job_result(job.int_sum, job.e_max, job.values, exponents is not None, self._ctx.n_workers, self._pool.k,
                            len(x), job.stats)
        result.stats.tat_s = time.perf_counter() - t0
        log.debug("rank %d: all-reduce of %d %s elements in %.4f s: %s", self._ctx.rank, len(x), x.dtype, result.stats.tat_s, result.stats)
        return result

    def flushed(self, inputs: np.ndarray, result: AllReduceResult) -> int:
        """How many nonzero elements of this rank's ``inputs`` the result's block exponents
        quantized to 0 (protocol.quantize.flushed_to_zero; none for an int32 sum)."""
        if result.exponents is None:
            return 0
        return flushed_to_zero(inputs, result.exponents, self._ctx.n_workers, self._pool.k)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> "SwitchMLClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
