"""The training workload offline (no Mininet): the model, the replay, and the claim of issue 11.

The replay of configs/training_convergence.yaml with SwitchML's 32-bit arithmetic is, bit
for bit, what the emulated run must compute (the runner checks every step against it), so
the convergence claim can be tested here in seconds: 32-bit SwitchML follows the exact
float64 trajectory within its quantization bound and reaches the same test accuracy, while
5-bit quantization does not -- the comparison can fail.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from experiments.config import load_experiment
from experiments.kinds.training_replay import Replay, exact_sum, quantized_sum, replay
from experiments.kinds.training_results import training_summary
from hosts.training import steps
from protocol.quantize import error_bound, expected_sum
from workloads.training import MLP, Dataset, TrainingConfig, array_digest, load_dataset, minibatch, sgd_update, shard

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "training_convergence.yaml"
ACCURACY_TOLERANCE_PP = 0.5
"""Issue 11: SwitchML's final test accuracy within 0.5 percentage points of exact."""
FLOAT32_STORAGE = 2.0**-24
"""Relative rounding of storing an updated parameter as float32."""


@pytest.fixture(scope="module")
def setup() -> tuple[MLP, TrainingConfig, Dataset, int, int]:
    point = load_experiment(CONFIG, ["switch.target=embedded"]).points[0]
    config = TrainingConfig.from_workload(point.workload)
    return MLP(config.hidden_units), config, load_dataset(config), len(point.topology.hosts), point.protocol["k"]


@pytest.fixture(scope="module")
def exact(setup):
    model, config, data, n, _ = setup
    return replay(model, config, data, n, exact_sum)


def quantized_run(setup, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Parameters after every step of the training with ``bits``-bit SwitchML sums, and the
    accumulated bound on their distance to the exact trajectory: per step, the proven error
    of the quantized sum (protocol.quantize.error_bound) times lr/n, plus float32 storage
    rounding of the parameters -- summed over steps. Summing assumes that SGD does not
    amplify a small perturbation of the parameters; that is not proven for this model, so
    the trajectory test checks it too: amplification would carry the distance past the bound."""
    model, config, data, n, k = setup
    state = Replay(model, config, data, n)
    params = np.empty((config.steps, model.parameter_count), dtype=np.float32)
    bound = np.empty(config.steps)
    accumulated = 0.0
    for step in range(config.steps):
        gradients = state.gradients()
        result = expected_sum(gradients, k, n, bits)
        per_element = error_bound(result.scale, n, result.values)
        exact_here = exact_sum(gradients)
        assert np.all(np.abs(result.values - exact_here) <= per_element), f"step {step + 1}: sum beyond its proven bound"
        params[step] = state.apply(result.values)
        accumulated += config.learning_rate / n * float(per_element.max()) + FLOAT32_STORAGE * float(np.abs(params[step]).max())
        bound[step] = accumulated
    return params, bound


@pytest.fixture(scope="module")
def quantized(setup) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """``quantized_run`` for the widths the tests compare, each computed once."""
    return {bits: quantized_run(setup, bits) for bits in (32, 8, 5)}


def final_test_accuracy(setup, params: np.ndarray) -> float:
    model, _, data, _, _ = setup
    return model.evaluate(params, data)[2]


def test_switchml_follows_the_exact_trajectory_within_the_quantization_bound(setup, exact, quantized) -> None:
    params, bound = quantized[32]
    distance = np.abs(params.astype(np.float64) - exact.params).max(axis=1)
    assert np.all(distance <= bound), f"first step beyond the bound: {int(np.argmax(distance > bound)) + 1}"
    difference_pp = 100 * (final_test_accuracy(setup, params[-1]) - final_test_accuracy(setup, exact.params[-1]))
    assert abs(difference_pp) <= ACCURACY_TOLERANCE_PP
    assert final_test_accuracy(setup, exact.params[-1]) > 0.9  # it really learns


def test_the_comparison_fails_with_too_few_bits(setup, exact, quantized) -> None:
    """5 bits: accuracy visibly off. 8 bits: accuracy may match, the trajectory does not."""
    (_, bound32), (eight, _), (five, _) = quantized[32], quantized[8], quantized[5]
    exact_accuracy = final_test_accuracy(setup, exact.params[-1])
    assert abs(100 * (final_test_accuracy(setup, five[-1]) - exact_accuracy)) > ACCURACY_TOLERANCE_PP
    for params in (five, eight):
        assert np.abs(params[-1].astype(np.float64) - exact.params[-1]).max() > 1000 * bound32[-1]


def test_32_bit_replay_is_the_protocols_arithmetic(setup) -> None:
    """quantized_sum(k, 32) is expected_sum with the protocol's default scale, bit for bit."""
    model, config, data, n, k = setup
    gradients = Replay(model, config, data, n).gradients()
    np.testing.assert_array_equal(quantized_sum(k, 32)(gradients), expected_sum(gradients, k, n).values)


def test_gradient_matches_finite_differences(setup) -> None:
    model, config, data, n, _ = setup
    params = model.initial_parameters(config.seed)
    x, y = minibatch(config, data, 0, n, 1)

    def loss(p: np.ndarray) -> float:
        logits = model.logits(p, x)
        shifted = logits - logits.max(axis=1, keepdims=True)
        log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        return float(-log_p[np.arange(len(y)), y].mean())

    gradient = model.gradient(params, x, y)
    probe = params.astype(np.float64)
    for index in (0, 700, model.parameter_count - 15, model.parameter_count - 1):
        step = np.zeros_like(probe)
        step[index] = 1e-5
        numeric = (loss(probe + step) - loss(probe - step)) / 2e-5
        assert gradient[index] == pytest.approx(numeric, abs=1e-5)


def test_training_is_a_function_of_config_step_and_rank(setup) -> None:
    model, config, data, n, _ = setup
    a, b = minibatch(config, data, 3, n, 7), minibatch(config, data, 3, n, 7)
    np.testing.assert_array_equal(a[0], b[0])
    assert not np.array_equal(minibatch(config, data, 3, n, 8)[0], a[0])
    owned = np.concatenate([shard(len(data.y_train), rank, n) for rank in range(n)])
    assert sorted(owned) == list(range(len(data.y_train)))  # the shards partition the training set
    assert array_digest(model.initial_parameters(config.seed)) == array_digest(model.initial_parameters(config.seed))


def test_equal_sums_give_bit_identical_parameters(setup) -> None:
    model, config, _, n, _ = setup
    params = model.initial_parameters(config.seed)
    total = np.linspace(-1, 1, model.parameter_count).astype(np.float32)
    assert array_digest(sgd_update(params, total, n, 0.5)) == array_digest(sgd_update(params.copy(), total.copy(), n, 0.5))
    assert array_digest(sgd_update(params, total, n, 0.5)) != array_digest(sgd_update(params, total * 1.0001, n, 0.5))


def test_dataset_round_trips_through_the_workers_file(setup, tmp_path: Path) -> None:
    _, _, data, _, _ = setup
    data.save(tmp_path / "d.npz")
    loaded = Dataset.load(tmp_path / "d.npz")
    assert len(data.y_train) + len(data.y_test) == 1797
    for name in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(data, name))


def test_worker_steps_follow_the_runner_in_order() -> None:
    assert list(steps(io.StringIO("go 1\ngo 2\nexit\n"))) == [1, 2]
    with pytest.raises(ValueError, match="expected 'go 2'"):
        list(steps(io.StringIO("go 1\ngo 3\n")))
    with pytest.raises(EOFError):
        list(steps(io.StringIO("go 1\n")))


def test_summary_is_computed_from_the_steps_table() -> None:
    """training_summary.csv of the fixture run, recomputed from its training_steps.csv by hand."""
    run = Path(__file__).resolve().parent / "data" / "results_small" / "training_convergence"
    steps = pd.read_csv(run / "training_steps.csv")
    target = 0.9
    table = training_summary(steps, target).set_index("series")
    pd.testing.assert_frame_equal(table.reset_index(), pd.read_csv(run / "training_summary.csv"), check_dtype=False)
    last = steps["step"].max()
    exact_final = steps.loc[(steps["series"] == "exact") & (steps["step"] == last), "test_accuracy"].item()
    for series, rows in steps.groupby("series"):
        final = rows[rows["step"] == last].iloc[0]
        assert table.loc[series, "test_accuracy_diff_pp"] == pytest.approx(100 * (final["test_accuracy"] - exact_final))
        assert table.loc[series, "max_param_diff"] == rows["max_param_diff"].max()
        reached = rows[rows["test_accuracy"] >= target].sort_values("step")
        if reached.empty:
            assert np.isnan(table.loc[series, "steps_to_target"])
            continue
        assert table.loc[series, "steps_to_target"] == reached["step"].iloc[0]
        if final["source"] == "network":
            assert table.loc[series, "time_to_target_s"] == reached["emulated_time_s"].iloc[0]
            assert table.loc[series, "verified"]
        else:
            assert np.isnan(table.loc[series, "time_to_target_s"])
