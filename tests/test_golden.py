"""Today's configs run what they ran before the plug-in axis (issue 39): the golden plans.

tests/data/golden_plans.json holds, for every shipped config on the embedded and eBPF
targets, each point's resolved config, hosts, link rate, deadlines and every method's worker
spec, recorded from main before the refactor (tests/golden_plans.py). A difference names the
config and the first key that moved.
"""

from __future__ import annotations

import json

import pytest

from tests.golden_plans import GOLDEN, SIMULATED_GOLDEN, SIMULATED_RUNS, TARGETS, as_json, plan, shipped_configs, simulated_results

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

RECORDED = json.loads(GOLDEN.read_text())


def first_difference(recorded: object, now: object, where: str = "") -> str | None:
    if isinstance(recorded, dict) and isinstance(now, dict):
        for key in sorted(set(recorded) | set(now)):
            if key not in recorded or key not in now:
                return f"{where}.{key}: {'added' if key in now else 'gone'}"
            found = first_difference(recorded[key], now[key], f"{where}.{key}")
            if found:
                return found
        return None
    if isinstance(recorded, list) and isinstance(now, list) and len(recorded) == len(now):
        return next(filter(None, (first_difference(a, b, f"{where}[{i}]") for i, (a, b) in enumerate(zip(recorded, now)))), None)
    return None if recorded == now else f"{where}: {recorded!r} -> {now!r}"


def test_every_shipped_config_has_a_golden_plan() -> None:
    assert sorted(RECORDED) == sorted(f"{config.stem}@{target}" for config in shipped_configs() for target in TARGETS)


@pytest.mark.parametrize("config", shipped_configs(), ids=lambda path: path.stem)
def test_a_shipped_config_plans_what_it_planned_before(config) -> None:
    for target in TARGETS:
        key = f"{config.stem}@{target}"
        difference = first_difference(RECORDED[key], as_json(plan(config, target)))
        assert difference is None, f"{key}: the plan changed at {difference}"


def test_short_runs_on_the_simulated_clock_give_what_they_gave_before(tmp_path) -> None:
    """The results, not only the plans: on the simulated clock a run is deterministic, so each
    rank's TAT, frames, resends and error equal what main gave (a loss-free and a lossy run)."""
    recorded = json.loads(SIMULATED_GOLDEN.read_text())
    now = simulated_results(tmp_path)
    for name in SIMULATED_RUNS:
        assert now[name] == recorded[name], f"{name}: the simulated results changed (first rank differing: " \
            f"{next((a, b) for a, b in zip(recorded[name], now[name]) if a != b)})"
        assert now[f"{name} summary"] == recorded[f"{name} summary"], f"{name}: summary.json's bound and pace changed"
