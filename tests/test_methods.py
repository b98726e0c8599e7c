"""The methods registry (methods/): what every reader of a method's record relies on."""

from __future__ import annotations

import importlib
import inspect

import numpy as np
import pytest

import methods
from analysis import models
from analysis.switchml import models as switchml_models
from analysis.figures import METHOD_COLORS, METHOD_LABELS
from base.yamlschema import ConfigError
from experiments.config import CONFIG_DIR, experiment_schema, load_experiment
from hosts.allreduce import Method as HostMethod
from base import optional
from methods import REGISTRY, verification
from methods.verification import expected_for
from switches import targets

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)


@pytest.mark.parametrize("method", REGISTRY, ids=lambda method: method.name)
def test_every_host_entry_imports_and_builds_from_a_spec(method) -> None:
    module, sep, attribute = method.host.partition(":")
    assert sep, f"{method.name}: host {method.host!r} is not module:attribute"
    host = getattr(importlib.import_module(module), attribute)
    assert list(inspect.signature(host).parameters) == ["spec", "rank"]
    for name in vars(HostMethod):
        if not name.startswith("_"):
            assert callable(getattr(host, name, None)), f"{method.host} has no {name}()"


def test_names_labels_and_colours_are_distinct() -> None:
    for field in ("name", "label", "colour"):
        values = [getattr(method, field) for method in REGISTRY]
        assert len(set(values)) == len(values), f"two methods share a {field}: {values}"


def test_the_schema_allows_exactly_the_registered_methods() -> None:
    assert experiment_schema()["properties"]["methods"]["items"]["enum"] == list(methods.NAMES)
    for method in REGISTRY:
        runs_here = method.aggregation is None or any(method.aggregation.name in t.protocols for t in targets.REGISTRY.values())
        if method.unavailable() is None and runs_here:  # a protocol no target runs yet is refused naming it (tests/test_atp_udp.py)
            load_experiment(CONFIG_DIR / "8workers.yaml", [f"methods=[{method.name}]"])
    with pytest.raises(ConfigError, match=r"methods\[0\]: 'allgather' is not one of \['switchml', 'atp', 'ring', 'ps', 'gloo'\]"):
        load_experiment(CONFIG_DIR / "8workers.yaml", ["methods=[allgather]"])


def test_a_method_this_machine_cannot_run_is_refused_as_the_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without PyTorch, a config naming gloo fails in one line saying how to install it."""
    monkeypatch.setattr(optional.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError) as refused:
        load_experiment(CONFIG_DIR / "8workers.yaml", ["methods=[ring,gloo]"])
    assert str(refused.value) == (f"{CONFIG_DIR / '8workers.yaml'}: methods: gloo needs PyTorch, which is not installed: "
                                  "pip install -e '.[torch]' (or ./scripts/bootstrap.sh --torch)")
    load_experiment(CONFIG_DIR / "8workers.yaml")  # the main job names no such method


def test_an_unknown_name_is_refused_naming_the_registered_ones() -> None:
    with pytest.raises(KeyError, match="registered: switchml, atp, ring, ps, gloo"):
        methods.by_name("allgather")


@pytest.mark.parametrize("method", REGISTRY, ids=lambda method: method.name)
def test_bounds_are_positive_and_below_the_link_rate(method) -> None:
    """No method aggregates more 32-bit elements per second than its link carries bits / 32."""
    for n_workers in (2, 8, 32):
        assert 0 < method.bound(10e6, n_workers, 32) <= 10e6 / 32


def test_the_records_carry_what_the_analysis_and_verifier_used_to_write_out() -> None:
    switchml, atp, ring, ps, gloo_ = (methods.by_name(name) for name in ("switchml", "atp", "ring", "ps", "gloo"))
    assert methods.REGISTRY[0] is methods.SWITCHML is switchml and methods.BASELINES == (atp, ring, ps, gloo_)
    assert switchml.bound(5e6, 8, 32) == switchml_models.switchml_line_rate_ate(5e6, 32)
    assert ring.bound(5e6, 8, 32) == models.ring_ate_bound(5e6, 8) == ps.bound(5e6, 8, 32) == gloo_.bound(5e6, 8, 32)
    assert (switchml.verify, ring.verify, ps.verify, gloo_.verify) == (
        verification.integer_sum, verification.float_sum, verification.float_sum, verification.float_sum)
    assert (switchml.aggregation, ring.aggregation, ps.aggregation, gloo_.aggregation) == (methods.aggregation("switchml"), None, None, None)
    assert switchml.aggregation.sum_bits == 32 and switchml.host == switchml.aggregation.host
    assert atp.aggregation is methods.aggregation("atp") and atp.host == atp.aggregation.host == "hosts.atp.method:ATPMethod"
    assert atp.bound(5e6, 8, 32) < switchml.bound(5e6, 8, 32), "ATP's 16-byte header against SwitchML's 13"
    assert list(METHOD_LABELS) == list(METHOD_COLORS) == list(methods.NAMES)


def test_each_verification_kind_checks_its_own_way() -> None:
    """SwitchML's record asks for the integer sum bit for bit; the baselines' for the float32 bound."""
    inputs = [np.linspace(-1, 1, 64, dtype=np.float32) * (rank + 1) for rank in range(3)]
    expected = expected_for(inputs, 32)
    switchml, ring = methods.by_name("switchml"), methods.by_name("ring")
    assert switchml.verify(expected, expected.switchml.values, expected.switchml.int_sum).verified
    assert not switchml.verify(expected, expected.switchml.values, None).verified, "no integer sum: not verified"
    float_sum = (inputs[0] + inputs[1]) + inputs[2]
    assert ring.verify(expected, float_sum, None).verified
    assert not ring.verify(expected, float_sum + 1e-3, None).verified
