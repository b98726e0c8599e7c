"""ATP's worker core, differentially: hosts/atp/worker.py's ``WorkerCore`` against worker.c's
(hosts/atp/native), call by call.

Two cores run the same all-reduce: the Python one, and a twin whose state worker.c advances
(``NativeCore``). Each turn hands both the same datagram or the same time and demands the same
payloads back, byte for byte, then the same state: progress, window, timers, every per-packet
array, the aggregator map and every count. The datagrams are the network's answers to what the
worker sent (results, some ECN-marked, some collision results with a new index, in or out of the
pool, free or taken), lost ones (gap and timeout resends), duplicates, and what an untrusted
network may bring: any bytes, any length, headers with any field. Hypothesis picks the script;
a seeded lossy scenario checks that every branch of the core was taken at least once.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hosts.atp.aggregators import AggregatorMap
from hosts.atp.native import compile_command, compiler, library
from hosts.atp.native.job import NativeCore
from hosts.atp.worker import ATPStalled, WorkerConfig, WorkerCore
from protocol.atp import params
from protocol.atp.packet import ATP_HEADER, ATPHeader, encode_payload, payload_bytes
from protocol.atp.quantize import dequantize_sum, job_scale, quantize_tensor

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

K, APP_ID, N_WORKERS, T0 = 4, 7, 3, 5.0
EXPONENTS = (None, 8, 127)
"""An int32 job (sent and summed as it is); float jobs of values within 2^8, and within 2^127,
whose sums dequantize beyond float32 (+-inf)."""
STATS = ("packets_sent", "resends_gap", "resends_timeout", "results", "duplicates", "ignored", "collisions_adopted", "ecn_results",
         "window_halvings", "cwnd")


@pytest.fixture(scope="module", autouse=True)
def native_library() -> None:
    """Skipped without a C compiler; with one, worker.c must build (a compile error fails)."""
    if compiler() is None:
        pytest.skip("no C compiler: hosts/atp/native/worker.c cannot be built here")
    library()


class Twins:
    """One all-reduce on both cores, from the same values, map, scale and time."""

    def __init__(self, n_values: int, positions: int, pool_size: int, congestion_control: bool, seq_base: int, seed: int,
                 exponent: int | None = EXPONENTS[1]) -> None:
        config = WorkerConfig(app_id=APP_ID, worker_id=1, n_workers=N_WORKERS, k=K, resend_timeout_s=0.004, stall_s=0.1,
                              congestion_control=congestion_control, frame_s=0.0002)
        rng = np.random.default_rng(seed)
        if exponent is None:
            values, scale = rng.integers(-(2**31), 2**31, n_values, dtype=np.int64).astype(np.int32), None
        else:
            values, scale = (rng.uniform(-1, 1, n_values) * 2.0**exponent).astype(np.float32), job_scale(exponent, N_WORKERS)
        self.sums = (quantize_tensor(values, exponent, N_WORKERS) if scale else values).astype(np.int64) * N_WORKERS
        """What the job's sum must be: every worker sends the same values."""
        self.python = WorkerCore(config, AggregatorMap(APP_ID, positions, pool_size), values, seq_base, T0, scale)
        self.twin = WorkerCore(config, AggregatorMap(APP_ID, positions, pool_size), values.copy(), seq_base, T0, scale)
        self.native = NativeCore(self.twin)
        self.sent: list[bytes] = []
        """Every payload the worker sent, for the network to answer."""

    def same(self, ours: list[bytes], theirs: list[bytes], what: str) -> None:
        assert ours == theirs, f"{what}: worker.py sent {len(ours)} payloads, worker.c {len(theirs)}, or different bytes"
        self.sent += ours
        assert self.native.next_timer() == self.python.next_timer(), f"{what}: next_timer"
        assert self.native.window == self.python.window, f"{what}: window"
        for received in range(self.python.window + 1):
            assert self.native.hold_s(received) == self.python.hold_s(received), f"{what}: hold after {received} results"
        self.native.sync()
        python, twin = self.python, self.twin
        for name in ("done_through", "next_packet", "cwnd", "_marker", "_ecn_in_window", "_last_progress"):
            assert getattr(twin, name) == getattr(python, name), f"{what}: {name}"
        for name in ("_done", "_sent_at", "_gap_resent", "_sums", "_values"):
            assert np.array_equal(getattr(twin, name), getattr(python, name)), f"{what}: {name}"
        assert twin._map.indices == python._map.indices and twin._map._used == python._map._used, f"{what}: the aggregator map"
        assert [getattr(twin.stats, s) for s in STATS] == [getattr(python.stats, s) for s in STATS], f"{what}: the counts"

    def start(self) -> None:
        self.same(self.python.start(T0), self.native.start(T0), "start")

    def receive(self, payload: bytes, now: float) -> None:
        self.same(self.python.receive(payload, now), self.native.receive(payload, now), f"receive at {now}")

    def expire(self, now: float) -> bool:
        """Both cores' timers at ``now``; False once the worker stalled (on both)."""
        try:
            ours = self.python.expire(now)
        except ATPStalled:
            assert self.native.expire(now) is None, "worker.py stalled, worker.c did not"
            return False
        theirs = self.native.expire(now)
        assert theirs is not None, "worker.c stalled, worker.py did not"
        self.same(ours, theirs, f"expire at {now}")
        return True


def result_of(payload: bytes, flags: int, new_agtr: int = params.NO_INDEX) -> bytes:
    """The PS's result for one of the worker's packets: every worker's values summed (wrapping)."""
    header = ATPHeader._make(ATP_HEADER.unpack_from(payload))
    values = np.frombuffer(payload, ">i4", K, ATP_HEADER.size).astype(np.int64) * N_WORKERS
    return encode_payload(header._replace(flags=params.FLAG_ACK | flags, new_agtr=new_agtr), values.astype(np.int32))


def altered(result: bytes, field: str, delta: int, core: WorkerCore) -> bytes:
    """A result one field away from acceptable: no ACK flag, another job, or a sequence at or
    just beyond either end of the all-reduce's (``delta`` picks which)."""
    header = ATPHeader._make(ATP_HEADER.unpack_from(result))
    if field == "flags":
        header = header._replace(flags=header.flags & ~params.FLAG_ACK | (params.FLAG_ECN if delta > 0 else 0))
    elif field == "app_id":
        header = header._replace(app_id=(APP_ID + delta) & 0xFFFF)
    else:
        edge = core.seq_base if delta < 0 else core.seq_base + core.n_packets - 1
        header = header._replace(seq=(edge + delta) % 2**32)
    return ATP_HEADER.pack(*header) + result[ATP_HEADER.size:]


SIZE = payload_bytes(K)
datagrams = st.one_of(
    st.binary(max_size=SIZE + 2),  # any bytes, any length
    st.builds(lambda bitmap, fan_in, flags, app_id, seq, agtr, new_agtr, values: encode_payload(
        ATPHeader(bitmap, fan_in, flags, app_id, seq, agtr, new_agtr), np.array(values, dtype=np.int32)),
        st.integers(0, 2**32 - 1), st.integers(0, 255), st.integers(0, 255), st.sampled_from([APP_ID, APP_ID + 1, 0, 0xFFFF]),
        st.integers(0, 2**32 - 1), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF),
        st.lists(st.integers(-(2**31), 2**31 - 1), min_size=K, max_size=K)),
)
"""What an untrusted network may bring: anything, or an ATP header with any fields."""
actions = st.one_of(
    st.tuples(st.just("result"), st.integers(0, 10**6), st.sampled_from([0, params.FLAG_ECN, params.FLAG_COLLISION,
                                                                         params.FLAG_COLLISION | params.FLAG_ECN, 0xFF]),
              st.integers(0, 0xFFFF)),
    st.tuples(st.just("forged"), datagrams),
    st.tuples(st.just("altered"), st.integers(0, 10**6), st.sampled_from(["flags", "app_id", "seq"]), st.integers(-2, 2)),
    st.tuples(st.just("wait"), st.floats(0.0, 0.03)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n_values=st.integers(1, 40 * K), positions=st.integers(1, 8), spare=st.integers(0, 3), congestion_control=st.booleans(),
       seq_base=st.sampled_from([1, 1000, 2**32 - 400]), exponent=st.sampled_from(EXPONENTS), script=st.lists(actions, max_size=120))
def test_both_cores_answer_any_datagram_alike(n_values: int, positions: int, spare: int, congestion_control: bool, seq_base: int,
                                              exponent: int | None, script: list) -> None:
    twins = Twins(n_values, positions, positions + spare, congestion_control, seq_base, seed=n_values, exponent=exponent)
    twins.start()
    now = T0
    for action in script:
        if action[0] == "result":
            _, which, flags, new_agtr = action
            twins.receive(result_of(twins.sent[which % len(twins.sent)], flags & ~params.FLAG_ACK, new_agtr), now)
        elif action[0] == "forged":
            twins.receive(action[1], now)
        elif action[0] == "altered":
            _, which, field, delta = action
            twins.receive(altered(result_of(twins.sent[which % len(twins.sent)], 0), field, delta, twins.python), now)
        else:
            now += action[1]
            if not twins.expire(now):
                return


def test_a_lossy_job_takes_every_branch_alike_and_ends_exact() -> None:
    """A seeded network that loses, duplicates, marks and re-points: the job ends on both cores
    with the same sums, and every branch the Python core has was taken."""
    rng = np.random.default_rng(11)
    twins = Twins(300 * K + 3, 8, 12, True, 1, seed=1)
    twins.start()
    now, answered = T0, 0
    while not twins.python.finished:
        assert now < T0 + 60, "the job does not end"
        if answered < len(twins.sent) and rng.random() < 0.9:
            payload = twins.sent[answered]
            answered += 1
            if rng.random() < 0.1:
                continue  # lost
            flags = (params.FLAG_ECN if rng.random() < 0.05 else 0) | (params.FLAG_COLLISION if rng.random() < 0.03 else 0)
            result = result_of(payload, flags, int(rng.integers(0, 14)))
            twins.receive(result, now)
            if rng.random() < 0.05:
                twins.receive(result, now)  # duplicated
            if rng.random() < 0.03:
                twins.receive(bytes(rng.integers(0, 256, int(rng.integers(0, SIZE + 3)), dtype=np.uint8)), now)
        else:
            now += 0.002
            assert twins.expire(now), "stalled"
    stats = twins.twin.stats
    assert np.array_equal(twins.twin.result, twins.python.result)
    assert np.array_equal(twins.python.result, twins.sums.astype(np.int32)), "each packet quantized as the whole tensor would be"
    assert np.array_equal(twins.twin.values, twins.python.values)
    assert np.array_equal(twins.python.values, dequantize_sum(twins.python.result, 8, N_WORKERS)), "dequantized as the whole sum would be"
    assert min(stats.resends_gap, stats.resends_timeout, stats.duplicates, stats.ignored, stats.collisions_adopted, stats.window_halvings) > 0
    assert max(stats.cwnd) > min(stats.cwnd), "the window grew and shrank"


def test_a_stalled_worker_stalls_on_both() -> None:
    twins = Twins(20 * K, 4, 4, True, 1, seed=2)
    twins.start()
    assert twins.expire(T0 + 0.005)
    assert not twins.expire(T0 + 0.2)


SANITIZED_RUN = """
import ctypes, sys
import hosts.atp.native as native
from hosts.atp.native.job import declare
lib = ctypes.CDLL(sys.argv[1])
declare(lib)
native.library = lambda: lib
from tests import test_native_atp as differential
differential.test_both_cores_answer_any_datagram_alike()
differential.test_a_lossy_job_takes_every_branch_alike_and_ends_exact()
print("clean")
"""


def test_forged_datagrams_find_no_memory_error_or_undefined_behaviour_in_worker_c() -> None:
    """The differential scripts against worker.c built with ASan and UBSan (aborting at the first
    report): no report, the same answers. Before a result for a packet not sent yet was ignored,
    ASan stopped it at a write past the send buffer."""
    from tests.test_untrusted_network import assert_clean_under_sanitizers, sanitized_library

    with tempfile.TemporaryDirectory() as directory:
        assert_clean_under_sanitizers(SANITIZED_RUN, *sanitized_library(Path(directory), compile_command, "libatp_worker_sanitized.so"))
