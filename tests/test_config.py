"""Configs and topologies: every shipped file validates; every mistake names its key."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pytest
import yaml

from base.yamlschema import MAX_YAML_BYTES, MAX_YAML_NODES, ConfigError, load_yaml
from switches.targets import REGISTRY
from experiments.config import CONFIG_DIR, check_emulable, load_experiment
from experiments.limits import RunLimits
import methods
from experiments import kinds
from protocol.params import REPO_ROOT
from topologies.model import TOPOLOGY_DIR, find_topology, load_topology

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

SHIPPED_CONFIGS = sorted(p for p in CONFIG_DIR.glob("*.yaml") if not p.name.endswith(".schema.yaml"))
SHIPPED_TOPOLOGIES = sorted(p for p in TOPOLOGY_DIR.glob("*.yaml") if not p.name.endswith(".schema.yaml"))
MAIN_CONFIG = CONFIG_DIR / "8workers.yaml"


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda p: p.name)
def test_shipped_config_validates(path: Path) -> None:
    experiment = load_experiment(path)
    assert experiment.points, f"{path} expands to no points"
    for point in experiment.points:
        assert point.topology.hosts


@pytest.mark.parametrize("path", SHIPPED_TOPOLOGIES, ids=lambda p: p.name)
def test_shipped_topology_validates(path: Path) -> None:
    topology = load_topology(path)
    assert sum(s.aggregate for s in topology.switches) == 1


def test_main_config_is_eight_workers_on_one_switch() -> None:
    point = load_experiment(MAIN_CONFIG).points[0]
    assert len(point.topology.hosts) == 8
    assert [s.name for s in point.topology.switches] == ["s1"]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("protocol.k=0", "protocol.k: 0 is not one of [32, 64, 128, 256]"),
        ("protocol.k=48", "protocol.k: 48 is not one of [32, 64, 128, 256]"),
        ("protocol.pool_size=600", "protocol.pool_size: 600 is larger than the switch's registers"),
        ("topology.workers=33", "topology.workers: switch s1 would aggregate 33 workers; a switch aggregates at most 32"),
        ("topology.workers=513", "topology.workers: 513 is greater than the maximum of 512"),
        ("topology.file=no-such-topology.yaml", "topology.file: topology 'no-such-topology.yaml': no such file"),
        ("topology.link.loss=1.5", 'topology.link.loss: 1.5 would lose every packet: a number is a probability, not a percentage; for 1.5 % write "1.5%" or 0.015'),
        ("topology.leaves=2", "topology.leaves: not allowed for kind star"),
        ("protocol.colour=blue", "protocol: unknown key(s) 'colour'"),
        ("methods=[switchml, allgather]", "methods[1]: 'allgather' is not one of"),
        ("workload.model=bert", "workload.model: not allowed for workload kind synthetic"),
        ("switch.target=tofino", "switch.target: 'tofino' is not one of"),
        ("repetitions=0", "repetitions: 0 is less than the minimum of 1"),
    ],
)
def test_bad_override_names_the_key(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_experiment(MAIN_CONFIG, [override])
    assert message in str(error.value)
    assert "8workers.yaml" in str(error.value)


@pytest.mark.parametrize(
    ("section", "key", "message"),
    [
        (None, "methods", "<top level>: 'methods' is a required property"),
        ("workload", "kind", "workload: 'kind' is a required property"),
        ("workload", "elements", "workload: 'elements' is a required property"),
    ],
)
def test_missing_key_is_named(tmp_path: Path, section: str | None, key: str, message: str) -> None:
    config = yaml.safe_load(MAIN_CONFIG.read_text())
    del (config[section] if section else config)[key]
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as error:
        load_experiment(path)
    assert str(error.value) == f"{path}: {message}"


def test_yaml_syntax_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "syntax.yaml"
    path.write_text("topology: {file: star.yaml\n")
    with pytest.raises(ConfigError, match=r"syntax.yaml: not valid YAML"):
        load_experiment(path)


BOMB_LEVELS = [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}' if i else '0'] * 9)}]" for i in range(9)]
BOMB = "".join(level + "\n" for level in BOMB_LEVELS)
"""Nine levels of nine aliases each: 9^9 values once expanded, from 400 bytes of text."""


@pytest.mark.parametrize("where", ["description", "methods"])
def test_an_alias_bomb_is_refused_in_one_line_before_it_expands(tmp_path: Path, where: str) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(MAIN_CONFIG.read_text() + BOMB + f"{where}: *l8\n")
    started = time.monotonic()
    with pytest.raises(ConfigError) as error:
        load_experiment(path)
    assert str(error.value) == f"{path}: its aliases expand to more than {MAX_YAML_NODES:,} values (an alias bomb?)"
    assert time.monotonic() - started < 5


def test_a_recursive_alias_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text(MAIN_CONFIG.read_text() + "description: &me [*me]\n")
    with pytest.raises(ConfigError, match="loop.yaml: its aliases expand to more than"):
        load_experiment(path)


def test_an_oversized_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "huge.yaml"
    path.write_text(MAIN_CONFIG.read_text() + "# " + "x" * MAX_YAML_BYTES + "\n")
    with pytest.raises(ConfigError, match=rf"huge.yaml: [0-9,]+ bytes; a YAML file here may have at most {MAX_YAML_BYTES:,}"):
        load_experiment(path)


def test_a_bomb_in_a_set_value_is_refused() -> None:
    with pytest.raises(ConfigError, match="value: its aliases expand to more than"):
        load_experiment(MAIN_CONFIG, ["description={" + ", ".join(BOMB_LEVELS) + ", all: *l8}"])


def test_shipped_traces_load_within_the_bounds() -> None:
    for trace in sorted((REPO_ROOT / "workloads" / "traces").glob("*.yaml")):
        assert trace.stat().st_size < MAX_YAML_BYTES / 10
        load_yaml(trace)


def test_sweep_value_is_validated_like_the_base() -> None:
    with pytest.raises(ConfigError, match=r"sweep topology.workers = 40.*topology.workers: switch s1 would aggregate 40 workers"):
        load_experiment(MAIN_CONFIG, ["sweep={param: topology.workers, values: [2, 40]}"])


def test_sweep_expands_into_points() -> None:
    experiment = load_experiment(MAIN_CONFIG, ["sweep={param: topology.workers, values: [2, 4]}"])
    assert [len(p.topology.hosts) for p in experiment.points] == [2, 4]
    assert [p.sweep_value for p in experiment.points] == [2, 4]


def test_set_override_is_typed() -> None:
    experiment = load_experiment(MAIN_CONFIG, ["protocol.timeout_ms=7.5", "topology.workers=3"])
    assert experiment.points[0].protocol["timeout_ms"] == 7.5
    assert len(experiment.points[0].topology.hosts) == 3


def test_set_without_equals_is_an_error() -> None:
    with pytest.raises(ConfigError, match="expected key.path=value"):
        load_experiment(MAIN_CONFIG, ["protocol.k"])


def test_tree_topology_routes_through_leaves() -> None:
    topology = load_topology(find_topology("tree"))
    assert topology.aggregator.name == "s1"
    assert topology.next_hop("h1", "s1") == "s2"
    assert topology.next_hop("s2", "h2") == "s1"
    assert topology.next_hop("s1", "h2") == "s3"


def test_explicit_topology_must_be_connected_tree(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({
        "kind": "explicit",
        "switches": [{"name": "s1", "aggregate": True}],
        "hosts": [{"name": "h1"}, {"name": "h2"}],
        "links": [{"endpoints": ["h1", "s1"]}, {"endpoints": ["h2", "s9"]}],
    }))
    with pytest.raises(ConfigError, match=r"links\[1\].endpoints: unknown node 's9'"):
        load_topology(path)


def test_explicit_topology_needs_one_aggregator(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump({
        "kind": "explicit",
        "switches": [{"name": "s1", "aggregate": True}, {"name": "s2", "aggregate": True}],
        "hosts": [{"name": "h1"}],
        "links": [{"endpoints": ["h1", "s1"]}, {"endpoints": ["s1", "s2"]}],
    }))
    with pytest.raises(ConfigError, match="exactly one switch must have aggregate: true"):
        load_topology(path)


def link_rates(experiment) -> set[float]:
    return {link.spec.bw_mbps for point in experiment.points for link in point.topology.links}


def test_a_target_runs_its_links_at_the_rate_it_keeps_up_with() -> None:
    """``topology.link.bw_mbps: target`` (the main config's) is each target's measured rate
    for the config's k (SwitchTarget.link_rates); ``switch.link_bw_mbps`` overrides it per
    target; a k without a measured rate is refused, naming the key and the k that have one."""
    for name, target in REGISTRY.items():
        loaded = load_experiment(MAIN_CONFIG, [f"switch.target={name}"])
        assert link_rates(loaded) == {target.link_mbps(256)} and target.link_mbps(256) > 0
        assert loaded.link_rate_source == f"shipped SwitchTarget.link_rates of {name} at k = 256"
    table = "switch.link_bw_mbps={bmv2: 1.25}"
    on_bmv2 = load_experiment(MAIN_CONFIG, [table, "switch.target=bmv2"])
    assert link_rates(on_bmv2) == {1.25}
    assert on_bmv2.link_rate_source == "switch.link_bw_mbps.bmv2"
    on_embedded = load_experiment(MAIN_CONFIG, [table, "switch.target=embedded"])
    assert link_rates(on_embedded) == {REGISTRY["embedded"].link_mbps(256)}
    numeric = load_experiment(MAIN_CONFIG, [table, "switch.target=embedded", "topology.link.bw_mbps=3"])
    assert link_rates(numeric) == {3} and numeric.link_rate_source == "--set topology.link.bw_mbps"
    for name, target in REGISTRY.items():  # each measured k runs at its own rate
        for k, rate in target.link_rates.items():
            assert link_rates(load_experiment(MAIN_CONFIG, [f"switch.target={name}", f"protocol.k={k}"])) == {rate}
    with pytest.raises(ConfigError, match=r"8workers.yaml: topology.link.bw_mbps: target: the embedded target has a measured "
                                          r"link rate for k = 32, k = 64, k = 256, not k = 128; give the rate in Mbit/s"):
        load_experiment(MAIN_CONFIG, ["switch.target=embedded", "protocol.k=128"])


def test_an_explicit_or_swept_link_rate_wins_over_the_targets() -> None:
    table = "switch.link_bw_mbps={bmv2: 1.25}"
    explicit = load_experiment(MAIN_CONFIG, [table, "switch.target=bmv2", "topology.link.bw_mbps=4"])
    assert link_rates(explicit) == {4} and explicit.link_rate_source == "--set topology.link.bw_mbps"
    swept = load_experiment(MAIN_CONFIG, [table, "switch.target=bmv2", "sweep={param: topology.link.bw_mbps, values: [1, 2]}"])
    assert link_rates(swept) == {1, 2} and swept.link_rate_source == "sweep topology.link.bw_mbps"
    other_sweep = load_experiment(MAIN_CONFIG, [table, "switch.target=bmv2", "sweep={param: topology.link.loss, values: [0, 0.01]}"])
    assert link_rates(other_sweep) == {1.25}


TRAINING_CONFIG = CONFIG_DIR / "training_convergence.yaml"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("workload.ablation_bits=[3]", "workload.ablation_bits: 3-bit sums leave no quantization level for 8 workers"),
        ("repetitions=2", "repetitions: a training runs once per method"),
        ("workload.dtype=int32", "workload.dtype: a training all-reduces float32 gradients"),
        ("workload.elements=100", "elements"),
        ("workload.dataset=mnist", "workload.dataset"),
        ("workload.learning_rate=0", "workload.learning_rate"),
        ("sweep={param: workload.learning_rate, values: [0.1, 0.5]}", "sweep: a training config does not sweep"),
    ],
)
def test_training_config_mistakes_are_named(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_experiment(TRAINING_CONFIG, [override])


def test_training_defaults_are_recorded_in_the_resolved_config(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump({"topology": {"file": "star.yaml", "workers": 2}, "methods": ["switchml"],
                                    "repetitions": 1, "workload": {"kind": "training"}}))
    workload = load_experiment(path).points[0].workload
    assert workload["steps"] == 300 and workload["ablation_bits"] == [8, 5] and workload["dataset"] == "digits"


def tree(**overrides: object):
    return load_topology(TOPOLOGY_DIR / "tree.yaml", {"workers": 4, "leaves": 2, **overrides})


def test_drop_simulator_rates_one_rate_everywhere_or_on_the_uplinks_only() -> None:
    lossy = {"bw_mbps": 10, "loss": 0.01}
    assert tree(link=lossy, uplink=lossy).drop_simulator_rates() == {"s1": (0.01, 0.0), "s2": (0.01, 0.01), "s3": (0.01, 0.01)}
    assert tree(link={"loss": 0.0}, uplink=lossy).drop_simulator_rates() == {"s1": (0.01, 0.01), "s2": (0.0, 0.0), "s3": (0.0, 0.0)}
    with pytest.raises(ValueError, match="different loss rates"):
        tree(link={"loss": 0.02}, uplink=lossy).drop_simulator_rates()


def test_tree_aggregation_is_recorded_and_star_refuses_it() -> None:
    topology = tree(aggregation="hierarchical")
    assert topology.aggregation == "hierarchical"
    assert [h.name for h in topology.local_hosts("s2")] == ["h1", "h3"]
    assert topology.leaf_address("s3") == ("02:53:4d:4c:01:02", "10.0.0.252")
    with pytest.raises(ConfigError, match="topology.aggregation: not allowed for kind star"):
        load_experiment(MAIN_CONFIG, ["topology.aggregation=hierarchical"])
    with pytest.raises(ConfigError, match="jobs sharing a switch run on one aggregating switch"):  # the shared-switch kind's rule
        kinds.load(MAIN_CONFIG, ["topology.file=tree.yaml", "topology.aggregation=hierarchical", "methods=[switchml]",
                                      "jobs=[{job_id: 1, hosts: [0, 1], pool_size: 8}]"])


def test_a_hierarchical_tree_takes_256_workers_with_a_wide_subnet() -> None:
    """Past one switch's 32 workers (--simulate): every leaf and the spine aggregate at most
    32, hosts and switches get addresses of their own, and a /24 too small for them is named."""
    experiment = load_experiment(REPO_ROOT / "configs" / "paper_hierarchical.yaml")
    topology = experiment.points[-1].topology
    assert len(topology.hosts) == 256 and set(topology.fan_in().values()) == {16}
    addresses = [h.ipv4 for h in topology.hosts] + [topology.aggregator_ipv4] + [topology.leaf_address(l.name)[1] for l in topology.leaves]
    assert len(set(addresses)) == 256 + 17 and topology.hosts[-1].ipv4 == "10.0.1.0" and topology.aggregator_ipv4 == "10.0.255.254"
    with pytest.raises(ConfigError, match=r"topology.subnet: 256 hosts and 17 switches need 273 addresses, 10.0.0.0/24 holds 254"):
        load_experiment(REPO_ROOT / "configs" / "paper_hierarchical.yaml", ["topology.subnet=10.0.0.0/24"])
    with pytest.raises(ConfigError, match="topology.workers: switch s2 would aggregate 33 workers"):
        load_experiment(REPO_ROOT / "configs" / "paper_hierarchical.yaml", ["topology.leaves=2", "sweep={param: topology.workers, values: [66]}"])


def test_an_emulated_run_takes_at_most_32_hosts_and_says_simulate_lifts_it() -> None:
    experiment = load_experiment(REPO_ROOT / "configs" / "paper_hierarchical.yaml")
    with pytest.raises(ConfigError, match=r"topology.workers = 64\): topology.workers: 64 hosts; an emulated run takes at most 32 .*--simulate"):
        check_emulable(experiment)
    check_emulable(load_experiment(MAIN_CONFIG))


# -- issue 21, point 5: values the schema took but a run could not use, refused at load time


@pytest.mark.parametrize(("override", "message"), [
    ("topology.workers=8.0", "topology.workers: 8.0 is not an integer (write 8)"),
    ("protocol.pool_size=64.0", "protocol.pool_size: 64.0 is not an integer (write 64)"),
    ("protocol.k=32.0", "protocol.k: 32.0 is not an integer (write 32)"),
    ("workload.elements=131072.0", "workload.elements: 131072.0 is not an integer (write 131072)"),
    ("limits.job_timeout_s=.nan", "limits.job_timeout_s: nan is not a finite number"),
    ("topology.link.delay_ms=.nan", "topology.link.delay_ms: nan is not a finite number"),
    ("topology.link.bw_mbps=.inf", "topology.link.bw_mbps: inf is not a finite number"),
    ("topology.subnet=10.999.999.0/24", "topology.subnet: '10.999.999.0/24' is not an IPv4 network"),
    ("workload.elements=1000000000", "workload.elements: 1,000,000,000 elements x 8 workers need about 192.1 GB of memory even on the simulated clock"),
])
def test_a_value_a_run_cannot_use_is_refused_in_one_line(override: str, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        load_experiment(MAIN_CONFIG, [override, "switch.target=embedded"])
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_a_job_the_links_cannot_carry_in_time_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"limits\.job_timeout_s: 1 s is too short for switchml: its all-reduce of 2,000,000 elements"):
        load_experiment(MAIN_CONFIG, ["limits.job_timeout_s=1", "workload.elements=2000000", "switch.target=embedded"])
    load_experiment(MAIN_CONFIG, ["limits.job_timeout_s=15", "switch.target=embedded"])  # 1,048,576 elements: the ring needs 11.7 s at 5 Mbit/s
    with pytest.raises(ConfigError, match=r"limits\.job_timeout_s: 60 s is too short for switchml: .* 100000 ms round trip"):
        load_experiment(MAIN_CONFIG, ["limits.job_timeout_s=60", "topology.link.delay_ms=50000", "switch.target=embedded"])


def test_each_methods_deadline_follows_from_its_bound_at_the_runs_rate() -> None:
    """Without limits.job_timeout_s, 5 x (a round trip + the elements at the method's bound) +
    10 s: on bmv2's 2 Mbit/s the main job's PS needs 29.4 s at its bound and took 37-53 s,
    past the 60 s every method had (issue: the VM user's first command failed)."""
    elements = 1048576
    for target in REGISTRY:
        rate = REGISTRY[target].link_mbps(256)
        [point] = load_experiment(MAIN_CONFIG, [f"switch.target={target}"]).points
        assert point.topology.link_mbps == rate and point.limits.job_timeout_s is None
        bounds = {m: methods.by_name(m).bound(rate * 1e6, 8, 256) for m in point.methods}
        for method, bound in bounds.items():
            limit = point.job_limit(method)
            assert limit.seconds == pytest.approx(5 * elements / bound + 10)
            assert limit.key == "limits.job_timeout_s" and f"5 x the {elements / bound:.3g} s its bound allows at {rate:g} Mbit/s" in limit.describe()
    [bmv2] = load_experiment(MAIN_CONFIG, ["switch.target=bmv2"]).points
    bmv2_bps = REGISTRY["bmv2"].link_mbps(256) * 1e6
    assert bmv2.job_limit("ps").seconds == pytest.approx(5 * 1.75 * 4 * elements / (bmv2_bps / 8) + 10) and bmv2.job_limit("ps").seconds > 200
    assert bmv2.job_limit("switchml").seconds < bmv2.job_limit("ring").seconds, "each method its own"


def test_a_deadline_the_config_sets_is_every_methods_and_unshaped_links_get_a_stated_one() -> None:
    [point] = load_experiment(MAIN_CONFIG, ["switch.target=embedded", "limits.job_timeout_s=45"]).points
    assert {point.job_limit(m).seconds for m in point.methods} == {45.0}
    assert point.job_limit("ps").describe().startswith("limits.job_timeout_s = 45 s")
    [unshaped] = load_experiment(MAIN_CONFIG, ["switch.target=embedded", "topology.link.bw_mbps=null"]).points
    assert unshaped.job_limit("ring").seconds == 60 and "unshaped links" in unshaped.job_limit("ring").describe()


@pytest.mark.parametrize("whole", [
    ["workload={kind: trace, model: ncf, size_scale: 0.001}"],
    ["sweep={param: workload, values: [{kind: trace, model: ncf, size_scale: 0.001}]}"],
], ids=["set", "sweep"])
def test_a_workload_given_whole_keeps_the_defaults_of_the_keys_it_does_not_name(whole: list[str]) -> None:
    """A sweep value replaced the whole section after the defaults were laid under it: the
    trace then had no time_dilation (a KeyError traceback at load)."""
    [point] = load_experiment(MAIN_CONFIG, ["switch.target=embedded", "limits.job_timeout_s=600", *whole]).points
    assert {key: point.workload[key] for key in ("dtype", "seed", "time_dilation", "size_scale")} == {
        "dtype": "float32", "seed": 1, "time_dilation": 1.0, "size_scale": 0.001}
    assert point.workload_info.name == "ncf"


def test_a_sweep_over_a_whole_section_keeps_its_defaults() -> None:
    [point] = load_experiment(MAIN_CONFIG, ["switch.target=embedded", "sweep={param: limits, values: [{job_timeout_s: 100}]}"]).points
    assert point.limits == RunLimits(worker_start_s=60.0, worker_exit_s=60.0, job_timeout_s=100.0)


def test_an_override_does_not_change_the_defaults_of_later_loads() -> None:
    load_experiment(MAIN_CONFIG, ["limits.worker_start_s=17", "limits.job_timeout_s=17"])
    assert load_experiment(MAIN_CONFIG).data["limits"] == {"worker_start_s": 60.0, "worker_exit_s": 60.0}


def _leaf_keys(schema: dict, prefix: str = "") -> dict[str, dict]:
    """Every dotted key a --set can name -> its schema (objects' properties, recursively)."""
    keys = {}
    for name, sub in schema.get("properties", {}).items():
        key = f"{prefix}{name}"
        keys[key] = sub
        if sub.get("type") == "object" or "properties" in sub:
            keys |= _leaf_keys(sub, key + ".")
    return keys


def _all_keys() -> dict[str, dict]:
    from experiments.config import experiment_schema
    from topologies.model import SCHEMA_PATH

    topology = yaml.safe_load(SCHEMA_PATH.read_text())
    link = topology["$defs"]["link"]
    keys = _leaf_keys(experiment_schema())
    keys |= {f"topology.{k}": v for k, v in topology["properties"].items() if k not in ("link", "uplink")}
    keys |= {f"topology.{part}.{k}": v for part in ("link", "uplink") for k, v in link["properties"].items()}
    return keys


SCHEMA_KEYS = _all_keys()


def _values():
    from hypothesis import strategies as st

    scalars = st.one_of(
        st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.integers(-10, 10).map(float),
        st.sampled_from([0, -1, 1, 2, 32, 2**31, 2**63, 10**30, 1e308, -1e308, 0.5]), st.booleans(), st.none(),
        st.text(max_size=12), st.sampled_from(["10.1.2.0/24", "10.999.0.0/24", "ebpf", "embedded", "star.yaml", "switchml"]),
    )
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                        max_leaves=6)


def _numbers(data) -> list:
    if isinstance(data, dict):
        return [n for v in data.values() for n in _numbers(v)]
    if isinstance(data, (list, tuple)):
        return [n for v in data for n in _numbers(v)]
    return [data] if isinstance(data, float) else []


def _get(data, key: str):
    for part in key.split("."):
        if not isinstance(data, dict) or part not in data:
            return None
        data = data[part]
    return data


BOMB_VALUE = "{" + ", ".join(BOMB_LEVELS) + ", all: *l8}"
"""The alias bomb above as one --set value."""


def test_any_value_for_any_key_loads_clean_or_is_refused_in_one_line() -> None:
    """Generated values for every schema key (floats for integers, NaN, infinities, huge and
    negative numbers, wrong types, nested junk, an alias bomb): a ConfigError of one line,
    or a config whose numbers are all finite and whose integer keys hold ints."""
    import math

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(key=st.sampled_from(sorted(SCHEMA_KEYS)), value=_values() | st.just(BOMB_VALUE))
    def check(key: str, value) -> None:
        text = value if value is BOMB_VALUE else yaml.safe_dump(value, default_flow_style=True, width=10**9).removesuffix("\n...\n").strip()
        try:
            experiment = load_experiment(MAIN_CONFIG, [f"{key}={text}", "switch.target=embedded"])
        except ConfigError as exc:
            assert str(exc).count("\n") == 0, str(exc)
            return
        for point in experiment.points:
            assert all(math.isfinite(n) for n in _numbers(point.data)), point.data
            assert all(math.isfinite(x) for link in point.topology.links for x in (link.spec.delay_ms, link.spec.loss,
                                                                                  link.spec.bw_mbps or 1.0))
            if SCHEMA_KEYS[key].get("type") == "integer":
                loaded = _get(point.data, key) if not key.startswith("topology.") else _get(point.topology.resolved, key[9:])
                assert isinstance(loaded, int) and not isinstance(loaded, bool), (key, loaded)

    check()


def test_a_per_target_rate_on_an_explicit_topology_names_the_key_that_set_it(tmp_path: Path) -> None:
    """switch.link_bw_mbps sets topology.link, which an explicit topology has not: the error
    used to name topology.link, a key the user never wrote (issue 21, point 8)."""
    path = tmp_path / "pair.yaml"
    path.write_text(yaml.safe_dump({"topology": {"file": "explicit-pair.yaml"}, "switch": {"link_bw_mbps": {"ebpf": 5}},
                                    "workload": {"kind": "synthetic", "elements": 1000}, "methods": ["switchml"]}))
    with pytest.raises(ConfigError) as raised:
        load_experiment(path, ["switch.target=ebpf"])
    assert str(raised.value) == (f"{path}: switch.link_bw_mbps.ebpf: explicit-pair.yaml is an explicit topology, whose links set "
                                 "their own rates (links[].bw_mbps); give the rate there, or use a star or tree topology")
    assert {link.spec.bw_mbps for link in load_experiment(path, ["switch.target=embedded"]).points[0].topology.links} == {10}


# -- issue 18: k is one of the sizes every switch target builds for


def test_the_schema_offers_exactly_the_k_the_registered_protocols_carry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Filled in from the protocols' records (methods.AGGREGATIONS' k_choices), like the other enums."""
    from dataclasses import replace

    from experiments.config import experiment_schema
    from protocol.switchml.params import K_CHOICES

    def k_enum() -> list[int]:
        return experiment_schema()["properties"]["protocol"]["properties"]["k"]["enum"]

    assert tuple(k_enum()) == K_CHOICES == methods.SWITCHML.aggregation.k_choices
    other = replace(methods.SWITCHML.aggregation, name="other", k_choices=(16, 256))
    monkeypatch.setattr(methods, "AGGREGATIONS", (*methods.AGGREGATIONS, other))
    assert k_enum() == [16, *K_CHOICES]


def test_a_config_without_k_gets_the_reference_clients_k(tmp_path: Path) -> None:
    data = yaml.safe_load((CONFIG_DIR / "8workers.yaml").read_text())
    del data["protocol"]["k"]
    config = tmp_path / "no_k.yaml"
    config.write_text(yaml.safe_dump(data))
    experiment = load_experiment(config, ["switch.target=embedded"])
    assert {point.protocol["k"] for point in experiment.points} == {256}


@pytest.mark.parametrize(("overrides", "message"), [
    (["sweep={param: sweep.param, values: [protocol.k]}"], "sweep.param: 'sweep.param': a sweep cannot vary the sweep itself"),
    (["sweep={param: sweep, values: [{param: protocol.k, values: [32]}]}"], "sweep.param: 'sweep': a sweep cannot vary the sweep itself"),
    (["sweep={param: topology.workers, values: [2, 4]}", "topology.workers=3"],
     "--set topology.workers: the sweep varies topology.workers, and its values would replace what --set gives"),
    (["sweep={param: protocol.pool_size, values: [8, 16]}", "protocol={k: 256, pool_size: 4}"],
     "--set protocol: the sweep varies protocol.pool_size"),
    (["sweep={param: topology.workers, values: [2, 4, 2]}"], "sweep.values: 2 appears twice; each point runs once"),
], ids=["over-sweep-param", "over-sweep", "set-and-swept", "set-a-section-swept-within", "duplicate-values"])
def test_a_sweep_that_would_run_other_points_than_written_is_refused(overrides: list[str], message: str) -> None:
    """A sweep over sweep.param ran a meaningless point; a swept key also given with --set
    took the sweep's values silently; a value listed twice ran twice."""
    with pytest.raises(ConfigError) as raised:
        load_experiment(MAIN_CONFIG, [*overrides, "switch.target=embedded"])
    assert message in str(raised.value) and "\n" not in str(raised.value)
    load_experiment(MAIN_CONFIG, ["sweep={param: topology.workers, values: [2, 4]}", "sweep.values=[2, 3]", "switch.target=embedded"])


def test_loading_a_config_builds_nothing_and_the_runner_refuses_a_data_path_it_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading is parsing and checking: the native worker is built (or found missing) when the
    runner resolves the data path (check_data_paths), never as a config loads."""
    from experiments.config import check_data_paths
    from hosts.switchml import native

    def no_compiler() -> None:
        raise native.NativeUnavailable("no C compiler (pretended)")

    monkeypatch.setattr(native, "resolve", functools.cache(native.resolve.__wrapped__))  # a cache of this test's own
    monkeypatch.setattr(native, "library", no_compiler)
    experiment = load_experiment(MAIN_CONFIG, ["protocol.data_path=native"])  # loads: nothing built
    with pytest.raises(ConfigError, match=r"8workers.yaml: protocol.data_path: native: SwitchML: no C compiler \(pretended\); 'auto' runs"):
        check_data_paths(experiment)
    check_data_paths(load_experiment(MAIN_CONFIG, ["protocol.data_path=native", "methods=[ring]"]))  # no SwitchML worker: no data path
    assert load_experiment(MAIN_CONFIG).points[0].data_path.name == "python", "auto falls back where native does not build"


def test_each_protocol_of_a_point_resolves_its_own_data_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """SwitchML and ATP in one point: each worker's loop is its own protocol's (the header once
    named SwitchML's worker.c for ATP's worker, and ATP was handed SwitchML's resolution)."""
    from experiments.config import check_data_paths
    from hosts.atp import native as atp_native
    from run_experiment import describe
    from hosts.switchml import native as switchml_native
    import methods

    def no_compiler() -> None:
        raise atp_native.NativeUnavailable("ATP's worker.c does not build (pretended)")

    for module in (atp_native, switchml_native):
        monkeypatch.setattr(module, "resolve", functools.cache(module.resolve.__wrapped__))  # caches of this test's own
    monkeypatch.setattr(atp_native, "library", no_compiler)
    switchml, atp = methods.aggregation("switchml"), methods.aggregation("atp")
    experiment = load_experiment(MAIN_CONFIG, ["methods=[switchml,atp,ring]", "switch.target=embedded"])
    [point] = experiment.points
    header = describe(experiment, "embedded").splitlines()
    assert any(line.startswith("  SwitchML worker: the native data path") for line in header), header
    assert any(line.startswith("  ATP worker: the Python worker") for line in header), header
    assert point.data_path_of(switchml).name == "native" and "hosts/switchml/native/worker.c" in point.data_path_of(switchml).reason
    assert point.data_path_of(atp).name == "python" and "ATP's worker.c does not build" in point.data_path_of(atp).reason
    with pytest.raises(ConfigError, match=r"protocol.data_path: native: ATP: ATP's worker.c does not build \(pretended\)"):
        check_data_paths(load_experiment(MAIN_CONFIG, ["methods=[switchml,atp]", "protocol.data_path=native", "switch.target=embedded"]))


@pytest.mark.parametrize("value", ["1.0", "{a: 1}", "text"])
def test_links_that_are_not_a_list_are_refused_by_the_schema(value: str) -> None:
    """The loss-unit check reads a topology's links before the schema does; links that are
    not a list are left to the schema's one line (it once iterated a float: a traceback)."""
    with pytest.raises(ConfigError, match="topology.links: .* is not of type 'array'"):
        load_experiment(MAIN_CONFIG, [f"topology.links={value}", "switch.target=embedded"])
