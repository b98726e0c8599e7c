"""Ring all-reduce and parameter server: exact int32 sums, bounded float32 error, dead peers.

Each rank is a separate spawned process on its own 127.0.0.x address; one process group per
world size runs both methods and all sizes back to back (which also exercises several
all-reduces over one set of connections).
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import time
import traceback

import numpy as np
import pytest

from hosts.parameter_server import ParameterServerAllReduce
from hosts.ring_allreduce import RingAllReduce
from hosts.tcp_mesh import PeerError, connect
from workloads.synthetic import synthetic_tensor

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

SIZES = (1, 7, 1001, 100003)
CHUNK_BYTES = 16384  # small, so 100003 elements span several pipelined chunks per segment for n <= 8
METHODS = {"ring": RingAllReduce, "ps": ParameterServerAllReduce}
U32 = 2.0**-24


def free_peer_groups(n: int, first_host: int, groups: int) -> list[list[tuple[str, int]]]:
    """``groups`` lists of n listening addresses: n loopback hosts, each with ``groups``
    different ports the kernel just reported free (all are held until every one is chosen,
    so no two groups can be given the same port of a host)."""
    held = [[socket.socket() for _ in range(n)] for _ in range(groups)]
    try:
        for group in held:
            for i, s in enumerate(group):
                s.bind((f"127.0.0.{first_host + i}", 0))
        return [[s.getsockname() for s in group] for group in held]
    finally:
        for group in held:
            for s in group:
                s.close()


def free_peers(n: int, first_host: int) -> list[tuple[str, int]]:
    return free_peer_groups(n, first_host, 1)[0]


def failure(exc: BaseException) -> str:
    """What a rank reports instead of its results: the error and where it was raised (a
    rank's own failure and the resets it causes in the others read differently)."""
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" at {frame.filename.rpartition('/')[2]}:{frame.lineno} in {frame.name}" if frame else ""
    return f"{exc!r}{where}"


def wrap_inputs(rank: int, size: int) -> np.ndarray:
    """Full-range int32 values so the sum wraps: the switch's wrapping add is what must match."""
    return np.random.default_rng([7, rank, size]).integers(-2**31, 2**31, size, dtype=np.int64).astype(np.int32)


def cases(rank: int) -> list[tuple[str, np.ndarray]]:
    out = []
    for size in SIZES:
        out.append((f"float32/{size}", synthetic_tensor(size, "float32", seed=1, rank=rank)))
        out.append((f"int32/{size}", synthetic_tensor(size, "int32", seed=1, rank=rank)))
        out.append((f"int32-wrap/{size}", wrap_inputs(rank, size)))
    return out


def run_rank(peers: dict[str, list], rank: int, queue: mp.Queue) -> None:
    """Both methods, every case, in one process: spawning dominates the test time."""
    try:
        results = {}
        for method, cls in METHODS.items():
            with cls(peers[method], rank, chunk_bytes=CHUNK_BYTES, timeout_s=20.0) as ar:
                for name, x in cases(rank):
                    out, stats = ar.allreduce(x)
                    results[method, name] = (out, stats.bytes_sent)
        queue.put((rank, results))
    except Exception as exc:  # report to the parent instead of dying silently
        queue.put((rank, failure(exc)))


def run_group(n: int, first_host: int, timeout_s: float = 60.0) -> dict[int, object]:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    ring, ps = free_peer_groups(n, first_host, groups=2)
    peers = {"ring": ring, "ps": ps}
    procs = [ctx.Process(target=run_rank, args=(peers, r, queue)) for r in range(n)]
    for p in procs:
        p.start()
    try:
        results = dict(queue.get(timeout=timeout_s) for _ in range(n))
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return results


@pytest.mark.parametrize("n", range(2, 9))
def test_sum_is_exact_for_int32_and_bounded_for_float32(n: int) -> None:
    results = run_group(n, first_host=10 + 10 * n)
    failed = {rank: res for rank, res in sorted(results.items()) if not isinstance(res, dict)}
    assert not failed, "ranks failed:\n" + "\n".join(f"rank {rank}: {res}" for rank, res in failed.items())
    inputs = [dict(cases(r)) for r in range(n)]
    for (method, name), _ in results[0].items():
        stacked = np.stack([inp[name] for inp in inputs])
        outs = [results[r][method, name][0] for r in range(n)]
        for r in range(1, n):
            assert np.array_equal(outs[0], outs[r]), f"{method} {name}: rank {r} differs from rank 0"
        if name.startswith("int32"):
            expected = stacked.astype(np.int64).sum(axis=0).astype(np.int32)  # int64 -> int32 wraps mod 2**32
            assert outs[0].dtype == np.int32
            assert np.array_equal(outs[0], expected), f"{method} {name}: int32 sum not exact"
        else:
            exact = stacked.astype(np.float64).sum(axis=0)
            # Sequential float32 summation of n terms: |error| <= gamma_{n-1} * sum|x_i|, gamma_k = k u / (1 - k u).
            gamma = (n - 1) * U32 / (1 - (n - 1) * U32)
            bound = gamma * np.abs(stacked.astype(np.float64)).sum(axis=0) * (1 + 1e-9)
            err = np.abs(outs[0].astype(np.float64) - exact)
            assert outs[0].dtype == np.float32
            assert np.all(err <= bound), f"{method} {name}: max error {err.max()} beyond bound"
    for method in METHODS:
        sent = results[0][method, "float32/100003"][1]
        assert sent >= 2 * 4 * 100003 * (n - 1) // n - 4 * n, f"{method}: rank 0 sent less than 2(n-1)/n of the tensor"


def test_int32_wrap_inputs_really_wrap() -> None:
    """Guard for the test above: the full-range inputs must overflow, or wrapping is not exercised."""
    stacked = np.stack([wrap_inputs(r, 1001).astype(np.int64) for r in range(2)])
    assert np.any(np.abs(stacked.sum(axis=0)) > 2**31 - 1)


def hang_after_connect(method: str, peers: list, rank: int, queue: mp.Queue) -> None:
    """A rank that sets up its connections, then never joins the all-reduce (alive but stuck)."""
    with METHODS[method](peers, rank, timeout_s=1.0):
        queue.put((rank, "connected"))
        time.sleep(8)


def allreduce_expecting_error(method: str, peers: list, rank: int, queue: mp.Queue) -> None:
    with METHODS[method](peers, rank, timeout_s=1.0) as ar:
        started = time.monotonic()
        try:
            ar.allreduce(np.ones(100_000, np.float32))
            queue.put((rank, ("no error", time.monotonic() - started)))
        except PeerError as exc:
            queue.put((rank, (str(exc), time.monotonic() - started)))


@pytest.mark.parametrize("method", sorted(METHODS))
def test_stuck_peer_raises_error_naming_it_within_timeout(method: str) -> None:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    peers = free_peers(3, first_host=200 + (20 if method == "ps" else 0))
    procs = [ctx.Process(target=allreduce_expecting_error, args=(method, peers, r, queue)) for r in (0, 1)]
    procs.append(ctx.Process(target=hang_after_connect, args=(method, peers, 2, queue)))
    for p in procs:
        p.start()
    try:
        got = dict(queue.get(timeout=30) for _ in range(3))
    finally:
        for p in procs:
            p.kill()
            p.join()
    assert got[2] == "connected"
    stuck = f"rank 2 at {peers[2][0]}:{peers[2][1]}"
    # The first rank to time out names the stuck rank 2; the other may instead report that
    # rank closing on it (which one times out first depends on scheduling). Both fail fast.
    messages = {rank: got[rank][0] for rank in (0, 1)}
    assert any(stuck in m for m in messages.values()), messages
    for rank in (0, 1):
        message, elapsed = got[rank]
        assert message != "no error"
        assert elapsed < 1.0 + 2.0, f"rank {rank}: error took {elapsed:.1f} s with a 1 s timeout"


def test_peer_that_never_listens_fails_connect_with_its_name() -> None:
    (host, port), = free_peers(1, first_host=250)
    started = time.monotonic()
    with pytest.raises(PeerError, match=f"rank 1 at {host}:{port}"):
        connect(0, 2, 1, (host, port), timeout_s=0.5)
    assert time.monotonic() - started < 2.0


def test_rejects_unsupported_dtype() -> None:
    with pytest.raises(TypeError, match="float64"):
        RingAllReduce([("127.0.0.1", 1)], 0).allreduce(np.zeros(3))


def test_single_rank_returns_its_own_tensor() -> None:
    x = synthetic_tensor(11, "int32", rank=0)
    for cls in METHODS.values():
        out, stats = cls([("127.0.0.1", 1)], 0).allreduce(x.reshape(11, 1))
        assert np.array_equal(out, x) and stats.bytes_sent == 0


def test_the_ring_cuts_every_segment_into_enough_chunks_to_pipeline() -> None:
    """A segment sent as one chunk does not pipeline (the next rank waits for all of it):
    262,144 float32 over 8 ranks was one 128 KiB chunk per segment, 60 % of the ring's bound."""
    from hosts.ring_allreduce import MIN_CHUNK_BYTES, PIPELINE_CHUNKS, pipeline_chunk_elements

    f32 = np.dtype(np.float32)
    assert pipeline_chunk_elements(262_144 // 8, f32, 128 * 1024) == 262_144 // 8 // PIPELINE_CHUNKS
    assert pipeline_chunk_elements(100_000_000, f32, 128 * 1024) == 128 * 1024 // 4  # never above chunk_bytes
    assert pipeline_chunk_elements(1_000, f32, 128 * 1024) == MIN_CHUNK_BYTES // 4  # nor below a few TCP segments
    assert pipeline_chunk_elements(1_000, f32, 512) == 128  # unless chunk_bytes is smaller still
