"""Grader strength: wrong solutions lose points, and say why; a correct other solution gets full marks.

Each lab has a correct solution written from its README alone (not the reference: other
names, other numpy, the README's words), and wrong ones, each the correct solution with one
region broken the way a student might break it. Each is written into the lab's default
skeleton (one skeleton per lab and track, reused: the regions are rewritten and restored)
and graded; a wrong one grades only the tests that should catch it, which must lose points
with a failure line naming what is wrong (``says``); the correct one grades the whole track.

This file holds an answer to every lab: no handout gets it (labs/skeleton.py, INSTRUCTOR_ONLY).
"""

from __future__ import annotations

import contextlib
import dataclasses
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from labs import catalog, record
from labs.grade import grade, score_table
from labs.markers import scan_file
from labs.skeleton import fill_regions, make_skeleton
from protocol.params import REPO_ROOT
from switches.target import Toolchain
from tests.conftest import require_track_machine


@dataclass(frozen=True)
class Attempt:
    """What a student writes into lab ``lab``'s regions of ``track``: per file, one body per
    region of the lab in that file, in order (indented as in a region of its own)."""

    lab: int
    track: str
    name: str
    regions: dict[str, tuple[str, ...]]
    tests: tuple[str, ...] = ()
    """Substrings of the graded test ids to grade (none: the whole track)."""
    says: str = ""
    """What a failing graded test's line must contain (empty: full marks expected)."""

    def broken(self, name: str, path: str, index: int, body: str, tests: tuple[str, ...], says: str) -> Attempt:
        """This attempt with region ``index`` of ``path`` written as ``body``."""
        regions = {**self.regions, path: tuple(body if i == index else old for i, old in enumerate(self.regions[path]))}
        return dataclasses.replace(self, name=name, regions=regions, tests=tests, says=says)


SWITCHML_BOUND, MODELS, SWITCHML_MODELS = "methods/switchml.py", "analysis/models.py", "analysis/switchml/models.py"
QUANTIZE, TIMERS = "protocol/quantize.py", "hosts/switchml/timers.py"
INGRESS_PY, INGRESS_P4 = "switches/embedded/switchml/ingress.py", "p4/switchml/include/ingress.p4"

LAB0 = Attempt(0, "python", "correct", {SWITCHML_BOUND: ("return k * link_bps / (8 * frame_bytes(k))",)})
LAB1 = Attempt(1, "python", "correct", {QUANTIZE: (
    """
    starts = np.arange(0, len(x), k)
    peaks = np.maximum.reduceat(np.abs(np.asarray(x, dtype=np.float64)), starts)
    with np.errstate(divide="ignore"):
        e = np.ceil(np.log2(peaks))
    e = np.where(peaks == 0, -128, e)
    return np.clip(e, -128, 127).astype(np.int8)
    """,
    "limit = (2 ** (bits - 1) - 1) // n_workers",
    """
    product = np.asarray(x, dtype=np.float64) * scale
    rounded = np.round(product)  # numpy rounds half to even
    if out is None:
        return rounded.astype(np.int32)
    out[...] = rounded.astype(np.int32)
    return out
    """,
)})
LAB2_PY = Attempt(2, "python", "correct", {INGRESS_PY: (
    """
    bitmap[idx] = b | rank_bit
    bitmap[other] = bitmap[other] & ~rank_bit & BIT32
    if b == 0:
        row[:] = packet.data
        exponent[idx] = hdr[SWITCHML_EXPONENT]
        count[idx] = 1
        version_seq[idx] = seq
    else:
        row += packet.data
        exponent[idx] = max(exponent[idx], hdr[SWITCHML_EXPONENT])
        count[idx] = count[idx] + 1
    """,
    """
    if count[idx] == num_workers:
        self._write_result(packet, row, exponent[idx])
        counter.count(EV_RESULT_MULTICAST, length)
        return (RESULT_TO_GROUP, mcast_grp, hdr[SWITCHML_JOB_ID])
    counter.count(EV_UPDATE_CONSUMED, length)
    return DROP
    """,
)})
LAB2_P4 = Attempt(2, "p4", "correct", {INGRESS_P4: (
    """
    bitmap.write(meta.reg_index, contributors | meta.rank_bit);
    bit<32> in_other;
    bitmap.read(in_other, meta.other_index);
    bitmap.write(meta.other_index, in_other & ~meta.rank_bit);
    if (contributors == 0) {
        store_first_values();
        max_exponent = (bit<32>)hdr.switchml.exponent;
        contributions = 1;
        seq.write(meta.reg_index, hdr.switchml.seq);
    } else {
        add_values();
        if ((int<8>)hdr.switchml.exponent > (int<8>)(bit<8>)max_exponent) {
            max_exponent = (bit<32>)hdr.switchml.exponent;
        }
        contributions = contributions + 1;
    }
    count.write(meta.reg_index, contributions);
    exponent.write(meta.reg_index, max_exponent);
    """,
    """
    if (contributions != num_workers) {
        mark_to_drop(standard_metadata);
        event_counter.count(EV_UPDATE_CONSUMED);
    } else {
        hdr.switchml.exponent = (bit<8>)max_exponent;
        make_result();
        standard_metadata.mcast_grp = result_mcast_grp;
        event_counter.count(EV_RESULT_MULTICAST);
    }
    """,
)})
LAB3_TIMERS = (
    "return pool_size * 8 * frame_bytes(k) / link_bps",
    """
    if self.median is None:
        return first
    return max(2 * self.median, floor)
    """,
    """
    due = self.timeouts_per_slot[slots] % self._policy.backoff_every == 0
    self._backoff[slots[due]] = 2 * self._backoff[slots[due]]
    """,
)
LAB3_PY = Attempt(3, "python", "correct", {TIMERS: LAB3_TIMERS, INGRESS_PY: (
    """
    self._write_result(packet, row, exponent[idx])
    counter.count(EV_RESULT_UNICAST, length)
    return (RESULT_TO_PORT, in_port, rank, hdr[SWITCHML_JOB_ID])
    """,
    """
    counter.count(EV_RETX_IGNORED, length)
    return DROP
    """,
)})
LAB3_P4 = Attempt(3, "p4", "correct", {TIMERS: LAB3_TIMERS, INGRESS_P4: (
    """
    read_values();
    hdr.switchml.exponent = (bit<8>)max_exponent;
    make_result();
    meta.dst_rank = meta.rank;
    standard_metadata.egress_spec = standard_metadata.ingress_port;
    event_counter.count(EV_RESULT_UNICAST);
    """,
    """
    event_counter.count(EV_RETX_IGNORED);
    mark_to_drop(standard_metadata);
    """,
)})
LAB4 = Attempt(4, "python", "correct", {SWITCHML_MODELS: (
    "return 2 * link_delay_s + 2 * 8 * frame_bytes(k) / link_bps",
    """
    window = pool_size * k / round_trip_s
    return min(window, switchml_line_rate_ate(link_bps, k))
    """,
)})
LAB5 = Attempt(5, "python", "correct", {MODELS: (
    """
    with_baseline = compute_s + comm_baseline_s
    return with_baseline / (compute_s + comm_switchml_s)
    """,
    "return training_speedup(compute_s, comm_ring_s, comm_ring_s * n_workers / (2 * (n_workers - 1)))",
)})

IN_PROCESS_2, IN_PROCESS_3 = ("test_lab2.py",), ("test_lab3.py",)
ATTEMPTS = [
    LAB0,
    LAB0.broken("bits, not bytes", SWITCHML_BOUND, 0, "return k * link_bps / frame_bytes(k)", ("test_lab0.py",), "frame_bytes(k) * 8 bits"),
    LAB0.broken("a constant bound", SWITCHML_BOUND, 0, "return 1.0", ("test_analysis.py::test_ate_vs_workers",),
                "a bound of 1 elements/s for a measured"),  # it passed test_ate_vs_workers: 2 of 10 points for any constant
    LAB1,
    LAB1.broken("round half up", QUANTIZE, 2, LAB1.regions[QUANTIZE][2].replace("np.round(product)", "np.floor(product + 0.5)"),
                ("test_lab1.py::test_quantize",), "half to even"),  # fmt: skip
    LAB1.broken("no room for n workers", QUANTIZE, 1, "limit = 2 ** (bits - 1) - 1", ("test_lab1.py",), "without overflow"),
    LAB2_PY,
    LAB2_PY.broken("the other set keeps the rank", INGRESS_PY, 0, LAB2_PY.regions[INGRESS_PY][0].replace(
        "bitmap[other] = bitmap[other] & ~rank_bit & BIT32", "pass"), IN_PROCESS_2, "clears the rank in the other"),  # fmt: skip
    LAB2_PY.broken("adds the first update to the old sum", INGRESS_PY, 0, LAB2_PY.regions[INGRESS_PY][0].replace(
        "row[:] = packet.data", "row += packet.data"), IN_PROCESS_2, "stored, not added"),  # fmt: skip
    LAB2_PY.broken("the README's old two-field return", INGRESS_PY, 1, LAB2_PY.regions[INGRESS_PY][1].replace(
        "(RESULT_TO_GROUP, mcast_grp, hdr[SWITCHML_JOB_ID])", "(RESULT_TO_GROUP, mcast_grp)"), IN_PROCESS_2, "(RESULT_TO_GROUP, mcast_grp, job id)"),  # fmt: skip
    LAB2_PY.broken("counts 1 byte per update", INGRESS_PY, 1, LAB2_PY.regions[INGRESS_PY][1].replace(
        "counter.count(EV_UPDATE_CONSUMED, length)", "counter.count(EV_UPDATE_CONSUMED, 1)"),
        ("count_their_frames_bytes",), "EV_UPDATE_CONSUMED counted 1 frame(s) and 1 bytes"),  # fmt: skip
    LAB2_P4,
    LAB2_P4.broken("a syntax error", INGRESS_P4, 1, "mark_to_drop(standard_metadata)", ("test_basic_reduction[bmv2-k32]",),
                   "ingress.p4("),  # fmt: skip
    LAB3_PY,
    LAB3_P4,
    LAB3_PY.broken("a retransmission is added again", INGRESS_PY, 1, "row += packet.data\ncounter.count(EV_RETX_IGNORED, length)\nreturn DROP",
                   IN_PROCESS_3, "must not be added twice"),  # fmt: skip
    LAB3_PY.broken("a resend counted with 0 bytes", INGRESS_PY, 1, "counter.count(EV_RETX_IGNORED, 0)\nreturn DROP",
                   ("counts_its_frames_bytes",), "EV_RETX_IGNORED counted 1 frame(s) and 0 bytes"),  # fmt: skip
    LAB3_PY.broken("the result goes to everyone", INGRESS_PY, 0, LAB3_PY.regions[INGRESS_PY][0].replace(
        "(RESULT_TO_PORT, in_port, rank, hdr[SWITCHML_JOB_ID])", "(RESULT_TO_GROUP, mcast_grp, hdr[SWITCHML_JOB_ID])"), IN_PROCESS_3, "to its sender only"),  # fmt: skip
    LAB3_PY.broken("no floor", TIMERS, 1, "return first if self.median is None else 2 * self.median",
                   ("test_timeout_adapts",), "never below the floor"),  # fmt: skip
    LAB3_PY.broken("backs off on every timeout", TIMERS, 2, "self._backoff[slots] *= 2", ("test_timers_back_off",), "assert"),
    LAB4,
    LAB4.broken("one way only", SWITCHML_MODELS, 0, "return link_delay_s + 8 * frame_bytes(k) / link_bps", ("test_lab4.py",), "the update up and the result back"),
    LAB5,
    LAB5.broken("communication only", MODELS, 0, "return comm_baseline_s / comm_switchml_s", ("test_lab5.py",), "compute plus all-reduce"),
]


def _indented(body: str, indent: str) -> list[str]:
    return [f"{indent}{line}" if line.strip() else "" for line in textwrap.dedent(body).strip("\n").splitlines()]


@pytest.fixture(scope="module")
def skeletons(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[tuple[int, str], Path]]:
    """One default skeleton per lab and track, made when first asked for."""

    class Trees(dict):
        def __missing__(self, key: tuple[int, str]) -> Path:
            lab = catalog.by_number(key[0])
            tree = tmp_path_factory.mktemp(f"lab{key[0]}-{key[1]}") / "tree"
            make_skeleton(REPO_ROOT, tree, lab, lab.track(key[1]))
            self[key] = tree
            return tree

    yield Trees()


@contextlib.contextmanager
def _written(attempt: Attempt, tree: Path) -> Iterator[None]:
    """Write ``attempt`` into ``tree``'s regions; put the stubs back afterwards."""
    originals = {path: (tree / path).read_text() for path in attempt.regions}
    try:
        for path, bodies in attempt.regions.items():
            regions = [region for region in scan_file(tree, path) if region.lab == attempt.lab]
            assert len(regions) == len(bodies), f"{attempt.name}: {path} has {len(regions)} lab {attempt.lab} regions"
            filled = {region: _indented(body, region.indent) for region, body in zip(regions, bodies, strict=True)}
            (tree / path).write_text(fill_regions(originals[path], filled))
        yield
    finally:
        for path, text in originals.items():
            (tree / path).write_text(text)


def _case(attempt: Attempt) -> pytest.param:
    track = catalog.by_number(attempt.lab).track(attempt.track)
    return pytest.param(attempt, id=f"lab{attempt.lab}-{attempt.track}-{attempt.name.replace(' ', '-')}",
                        marks=[getattr(pytest.mark, need) for need in track.needs])  # fmt: skip


@pytest.mark.timeout(600)
@pytest.mark.parametrize("attempt", [_case(attempt) for attempt in ATTEMPTS])
def test_the_grader_scores_a_solution_by_what_is_wrong_with_it(attempt: Attempt, skeletons) -> None:
    lab = catalog.by_number(attempt.lab)
    track = lab.track(attempt.track)
    require_track_machine(track.needs)
    graded = [test for test in track.tests if not attempt.tests or any(part in test.id for part in attempt.tests)]
    assert graded, f"{attempt.name}: no graded test matches {attempt.tests}"
    tree = skeletons[(attempt.lab, attempt.track)]
    with _written(attempt, tree):
        result = grade(lab, dataclasses.replace(track, tests=tuple(graded)), tree)
    table = score_table(lab, result)
    if not attempt.says:
        assert result.full_marks, table
        return
    assert not result.full_marks, f"{attempt.name} got full marks:\n{table}"
    assert any(attempt.says in test.message for test in result.tests if test.outcome != "pass"), table


@pytest.fixture(scope="module")
def reference_outputs() -> Iterator[dict[tuple[int, str], dict]]:
    """The reference's outputs of each track's calls (labs/record.py), made when first asked for."""

    class Outputs(dict):
        def __missing__(self, key: tuple[int, str]) -> dict:
            track = catalog.by_number(key[0]).track(key[1])
            self[key] = record.compute(REPO_ROOT, record.numbered(track.tests), None, Toolchain()).outputs
            return self[key]

    yield Outputs()


@pytest.mark.parametrize("attempt", [pytest.param(attempt, id=_case(attempt).id) for attempt in ATTEMPTS])
def test_the_grade_of_record_scores_a_solution_as_its_tests_do(attempt: Attempt, skeletons, reference_outputs) -> None:
    """An instructor's grade decides a test with calls from their outputs (labs/record.py),
    not from its assertions: the calls must catch every wrong solution its tests catch,
    and pass every correct one. Run here without the sandbox (it changes who runs the
    code, not what the outputs are)."""
    track = catalog.by_number(attempt.lab).track(attempt.track)
    graded = [test for test in track.tests if test.calls and (not attempt.tests or any(part in test.id for part in attempt.tests))]
    if not graded:
        pytest.skip(f"{attempt.name}: the tests it is graded on have no calls (pytest's verdict, in the sandbox)")
    calls = [numbered for numbered in record.numbered(track.tests) if numbered[1] in graded]
    with _written(attempt, skeletons[(attempt.lab, attempt.track)]):
        computed = record.compute(skeletons[(attempt.lab, attempt.track)], calls, None, Toolchain())
    verdicts = {test.id: record.verdict(test, calls, reference_outputs[(attempt.lab, attempt.track)], computed, "") for test in graded}
    failed = {id_: message for id_, (outcome, message) in verdicts.items() if outcome != "pass"}
    assert bool(failed) == bool(attempt.says), f"{attempt.name}: {failed or 'full marks'}"
