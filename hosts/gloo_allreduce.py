"""One rank of PyTorch's Gloo all-reduce (methods/gloo.py) on an emulated host.

The ranks form a torch.distributed process group with the Gloo backend: rendezvous at rank
0's address (the TCP store on the spec's port for rank 0), every Gloo connection bound to
the interface that carries this host's address (GLOO_SOCKET_IFNAME), so all of its traffic
crosses the emulated links and the switch, as the other methods' does. torch is imported
when a rank is built, never when this module is: everything else imports without it.

Two groups, for two time limits: the default group's rendezvous waits up to the spec's
``connect_timeout_s`` for ranks that start late (torch's import alone takes seconds per
rank on a busy machine); the all-reduces run on a second group whose Gloo timeout is the
spec's ``job_timeout_s``, counted from each operation's start, the deadline every method has.

Statistics as the other TCP baselines report theirs (hosts/collective.measured_run): kernel
TCP counter deltas of this host's namespace for segments, retransmissions and timeouts, a
segment timeline sampled every 10 ms, and the payload bytes of the process's sockets
(hosts/tcp_counters.process_tcp_payload: Gloo owns its sockets and counts nothing itself).
"""

from __future__ import annotations

import fcntl
import os
import socket
import struct
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING

import numpy as np

from hosts.collective import flat_copy
from hosts.stats import TIMELINE_BIN_S, JobStats
from hosts.tcp_counters import SegmentTimeline, TcpCounters, process_tcp_payload
from protocol.worker_spec import WorkerSpec

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

SIOCGIFADDR = 0x8915
"""ioctl: the IPv4 address of the interface named in a ``struct ifreq`` (linux/sockios.h)."""
IFNAMSIZ = 16


def interface_with_address(ipv4: str) -> str:
    """The name of this namespace's interface whose address is ``ipv4`` (``h1-eth0`` in Mininet)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                ifreq = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:IFNAMSIZ - 1]))
            except OSError:  # no IPv4 address on it
                continue
            if socket.inet_ntoa(ifreq[20:24]) == ipv4:
                return name
    raise RuntimeError(f"no interface of this host has the address {ipv4}, which the spec gives this rank")


def join_gloo_group(spec: WorkerSpec, rank: int) -> ProcessGroup:
    """Join the spec's ranks in torch.distributed's default Gloo group over the emulated
    links, and return a second group whose operations time out after ``job_timeout_s``.

    Also the DDP training's process group (hosts/torch_training.py).
    """
    import torch.distributed as dist

    address, port = spec.peers[rank][0], spec.peers[0][1]
    os.environ["GLOO_SOCKET_IFNAME"] = interface_with_address(address)
    # Gloo's ring takes a shared-memory path instead of its sockets when LOCAL_WORLD_SIZE
    # (set by torchrun) says every rank shares a node, as the emulated hosts do.
    os.environ.pop("LOCAL_WORLD_SIZE", None)
    dist.init_process_group("gloo", init_method=f"tcp://{spec.peers[0][0]}:{port}", rank=rank,
                            world_size=spec.n_workers, timeout=timedelta(seconds=spec.connect_timeout_s))
    return dist.new_group(backend="gloo", timeout=timedelta(seconds=spec.job_timeout_s))


class GlooMethod:
    """A rank of a Gloo process group with the worker's result shape (hosts.allreduce.Method)."""

    def __init__(self, spec: WorkerSpec, rank: int) -> None:
        import torch
        import torch.distributed as dist

        self._dist = dist
        self._torch = torch
        self.rank = rank
        self.job_timeout_s = spec.job_timeout_s
        torch.set_num_threads(1)  # n ranks share two cores: no intra-op thread pool per rank
        self._group: ProcessGroup = join_gloo_group(spec, rank)
        self._seq = 0

    def allreduce(self, tensor: np.ndarray) -> tuple[np.ndarray, None, JobStats]:
        """Sum ``tensor`` over the ranks in place on a copy (torch shares the numpy buffer)."""
        started = time.perf_counter()
        out = flat_copy(tensor)
        seq = self._seq
        self._seq += 1
        counters_before, (sent_before, received_before) = TcpCounters.read(), process_tcp_payload()
        timeline = SegmentTimeline(time.monotonic())
        stop_sampling = threading.Event()

        def sample() -> None:
            while not stop_sampling.wait(TIMELINE_BIN_S):
                timeline.sample(time.monotonic())

        work = self._dist.all_reduce(self._torch.from_numpy(out), group=self._group, async_op=True)
        sampler = threading.Thread(target=sample, name="gloo-timeline", daemon=True)
        sampler.start()
        try:
            work.wait()
        except RuntimeError as exc:  # torch's DistBackendError is one; Gloo says "Timed out" on its deadline
            if "timed out" in str(exc).lower():
                raise TimeoutError(f"gloo rank {self.rank}: all-reduce #{seq} of {out.size} {out.dtype} missed its deadline "
                                   f"of {self.job_timeout_s:g} s: {exc}") from exc
            raise
        finally:
            stop_sampling.set()
            sampler.join()
        tat_s = time.perf_counter() - started
        timeline.sample(time.monotonic(), final=True)
        delta = TcpCounters.read() - counters_before
        sent, received = process_tcp_payload()
        stats = JobStats(tat_s=tat_s, packets_sent=delta.out_segs, packets_received=delta.in_segs,
                         retransmissions=delta.retrans_segs, timeouts=delta.timeouts, duplicates=delta.dsack_sent,
                         bytes_sent=sent - sent_before, bytes_received=received - received_before, timeline=timeline.bins)
        return out, None, stats

    def close(self) -> None:
        self._dist.destroy_process_group()
