"""Experiment configs: YAML -> defaults -> ``--set`` overrides -> validated sweep points.

A config names a topology (with overrides), the switch target, the protocol parameters,
the workload, the methods and repetitions, and optionally a sweep over one dotted key.
Each sweep point is a complete config of its own, validated like the base one, so a
sweep value that breaks a rule (33 workers, pool larger than the registers) fails before
anything starts, with the file and the key in the message. So does a point that the
schema allows but the machine cannot run: tensors that cannot fit in its memory, or a job
whose links cannot carry it within the ``limits.job_timeout_s`` a config sets (without one,
each method's deadline follows from its bound: experiments/limits.py).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping


from base.cgroup import memory_limit
from base.yamlschema import STDIN, ConfigError, deep_merge, load_schema, load_yaml, parse_yaml, reject_keys, validate
from experiments.calibration.record import SOURCE_PREFIX as CALIBRATED_RATE_SOURCE, find_rate
from experiments.limits import Limit, RunLimits, fastest_allreduce_s, job_limit
from base.plugin import resolve
import methods
from methods.aggregation import Aggregation, DataPath, DataPathUnavailable
from network.cluster_config import ClusterSpec
from switches.targets import AUTO, REGISTRY
from topologies.model import Topology, find_topology, load_topology
import workloads.kinds
from workloads.kinds import describe_workload, workload_of
from workloads.workload import Workload, WorkloadInfo

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
SCHEMA_PATH = CONFIG_DIR / "experiment.schema.yaml"


def shipped_or_given(path: Path) -> Path:
    """``path`` itself when it exists, is standard input or is absolute; otherwise, if the
    testbed's tree has a file at that relative path (``configs/8workers.yaml``), that one:
    the documented commands then work from any folder, also with an installed testbed,
    whose configs live in site-packages. A file of the user's always wins over the shipped one."""
    if path == STDIN or path.is_absolute() or path.exists():
        return path
    shipped = CONFIG_DIR.parent / path
    return shipped if shipped.is_file() else path

DEFAULTS: dict[str, Any] = {
    "switch": {"target": "auto", **{key: value for protocol in methods.AGGREGATIONS for key, value in protocol.switch_defaults.items()}},
    "protocol": {"job_id": 1, **{key: value for protocol in methods.AGGREGATIONS for key, value in protocol.defaults.items()}},
    "workload": {"dtype": "float32", "seed": 1, "time_dilation": 1.0},
    "repetitions": 3,
    "loss_mechanism": "auto",
    "tcp_congestion_control": "cubic",
    "limits": {"worker_start_s": 60.0, "worker_exit_s": 60.0},
}


def experiment_schema() -> dict[str, Any]:
    """configs/experiment.schema.yaml with ``methods`` limited to the registered names
    (methods/), the switch targets filled in from theirs (switches/targets.py) and the
    workload kinds with their keys from theirs (workloads/kinds/), so that registering a
    method, a target or a workload is all it takes for configs to name it."""
    schema = load_schema(SCHEMA_PATH)
    schema["properties"]["methods"]["items"]["enum"] = [method.name for method in methods.REGISTRY]
    schema["properties"]["protocol"]["properties"]["k"]["enum"] = methods.k_choices()
    for protocol in methods.AGGREGATIONS:  # each protocol's own keys (ATP's protocol.atp), from its record
        schema["properties"]["protocol"]["properties"].update(copy.deepcopy(dict(protocol.properties)))
    workload = schema["properties"]["workload"]
    workload["properties"]["kind"]["enum"] = list(workloads.kinds.names())
    for kind in workloads.kinds.REGISTRY:
        workload["properties"].update(copy.deepcopy(dict(kind.properties)))
        if kind.required:
            workload.setdefault("allOf", []).append(
                {"if": {"required": ["kind"], "properties": {"kind": {"const": kind.name}}}, "then": {"required": list(kind.required)}})
    switch = schema["properties"]["switch"]["properties"]
    switch["target"]["enum"] = [AUTO, *sorted(REGISTRY)]
    switch["link_bw_mbps"]["properties"] = {
        name: {"type": "number", "exclusiveMinimum": 0, "description": f"the link rate in Mbit/s when the {name} target runs"} for name in REGISTRY}
    return schema


@dataclass(frozen=True)
class MemoryModel:
    """The peak memory of a run, all its processes together: a base (the interpreters,
    Mininet, the switch) and bytes per element and worker (each rank's input, its result and
    the integer buffers of its worker, and the runner's copy of every rank's input, which it
    keeps to check the sum). Measured as a memory cgroup's peak over runs of float32 tensors
    (docs/memory.md, benchmarks/memory_peak.py)."""

    clock: str
    base_bytes: int
    bytes_per_element: int

    def needed(self, jobs: list[tuple[int, int]]) -> int:
        return self.base_bytes + self.bytes_per_element * sum(elements * workers for elements, workers in jobs)


EMULATED_MEMORY = MemoryModel("in an emulated run", base_bytes=240_000_000, bytes_per_element=31)
SIMULATED_MEMORY = MemoryModel("even on the simulated clock, which needs the least", base_bytes=70_000_000, bytes_per_element=24)

MAX_EMULATED_HOSTS = 32
"""The most hosts an emulated network has (one switch's workers, protocol/params.py's MAX_WORKERS, and
what one machine's Mininet carries); the topology schema allows more for --simulate, whose
trees aggregate hierarchically (``check_emulable``)."""

LINK_RATE_KEY = "topology.link.bw_mbps"
TARGET_LINK_RATES_KEY = "switch.link_bw_mbps"
TARGET_RATE = "target"
"""``topology.link.bw_mbps: target``: the switch target's measured rate for the config's k."""
TARGET_RATE_SOURCE = "shipped SwitchTarget.link_rates of"
"""How the header and summary name a rate that came from the target's descriptor (a
calibrated one starts with CALIBRATED_RATE_SOURCE)."""
TARGET_RATE_SOURCES = (TARGET_RATE_SOURCE, CALIBRATED_RATE_SOURCE, f"{LINK_RATE_KEY}: {TARGET_RATE}")
"""How every rate of ``topology.link.bw_mbps: target`` is named: shipped, calibrated, or
the target's once ``auto`` has chosen it."""


@dataclass(frozen=True)
class JobSection:
    """The config's ``protocol`` section as every in-network protocol shares it: the switch's
    part of a job, typed (a protocol's own keys are its record's to read: methods/aggregation.py)."""

    k: int
    """Elements per packet."""
    pool_size: int
    job_id: int
    data_path: str
    """The worker loop the config asks for (auto, native, python); ``Point.data_path`` resolves it."""

    @classmethod
    def from_config(cls, section: Mapping[str, Any]) -> JobSection:
        return cls(int(section["k"]), int(section["pool_size"]), int(section["job_id"]), str(section["data_path"]))


@dataclass(frozen=True)
class Point:
    """One sweep point: a complete, validated experiment config and its topology."""

    index: int
    sweep_param: str | None
    sweep_value: Any
    data: Mapping[str, Any]
    topology: Topology
    chosen_data_paths: Mapping[str, DataPath] = field(default_factory=dict)
    """By protocol name, the data path that something other than this machine's build decided:
    the servers of a cluster (experiments/data_path.py) or the simulated clock's loops
    (experiments/simulated.py)."""

    @property
    def protocol(self) -> Mapping[str, Any]:
        return self.data["protocol"]

    @functools.cached_property
    def job(self) -> JobSection:
        """Its ``protocol`` section's shared keys, typed: parsed once, from the validated config."""
        return JobSection.from_config(self.protocol)

    @property
    def workload(self) -> Mapping[str, Any]:
        return self.data["workload"]

    @property
    def data_path(self) -> DataPath:
        """The loop of ``data_path_protocol``'s worker: the one summary.json records."""
        return self.data_path_of(data_path_protocol(self.methods))

    def data_path_of(self, protocol: Aggregation) -> DataPath:
        """Which implementation of ``protocol``'s worker loop runs: ``protocol.data_path``
        (``auto`` resolved by the protocol's own record, once per process) unless it was
        chosen (``chosen_data_paths``). Each protocol has its own native loop, so with SwitchML
        and ATP in one point each names its own; a protocol with no choice of loop follows
        ``first_with_a_choice``."""
        chosen = self.chosen_data_paths.get(protocol.name)
        if chosen is not None:
            return chosen
        reference = protocol if protocol.data_path is not None else first_with_a_choice()
        assert reference.data_path is not None
        return resolve(reference.data_path)(self.job.data_path)

    @property
    def methods(self) -> list[str]:
        return list(self.data["methods"])

    @property
    def repetitions(self) -> int:
        return int(self.data["repetitions"])

    @functools.cached_property
    def limits(self) -> RunLimits:
        """Its ``limits`` section, typed: parsed once, from the validated config."""
        return RunLimits.from_config(self.data["limits"])

    @property
    def cluster(self) -> ClusterSpec | None:
        """The servers besides this one and the placement (None: everything on this machine)."""
        section = self.data.get("cluster")
        return None if section is None else ClusterSpec.from_config(section)

    @property
    def workload_kind(self) -> Workload:
        """The record of its workload's kind (workloads/kinds/)."""
        return workload_of(self.workload)

    @property
    def workload_info(self) -> WorkloadInfo:
        return describe_workload(self.workload)

    def job_limit(self, method: str) -> Limit:
        """``method``'s deadline for one all-reduce here: limits.job_timeout_s, else derived
        from its bound (experiments/limits.py)."""
        return job_limit(self.limits, self.topology, method, _jobs(self.data, self.topology), self.job.k)


@dataclass(frozen=True)
class Experiment:
    name: str
    source: Path
    data: Mapping[str, Any]
    """The base config after defaults and --set overrides (sweep not applied)."""
    points: tuple[Point, ...]
    link_rate_source: str = LINK_RATE_KEY
    """Which key set the links' rate (summary.json records it): see ``apply_target_link_rate``."""
    unresolved: Mapping[str, Any] = field(default_factory=dict, repr=False)
    """``data`` before the target's link rate was applied, for ``with_target``."""
    overridden: frozenset[str] = frozenset()
    """The keys ``--set`` gave (they win over the target's rate)."""
    unavailable: tuple[str, ...] = ()
    """What this machine lacks to run it (``unavailable_here``): empty unless loaded for a dry run."""

    def with_target(self, target: str) -> Experiment:
        """The same config run on ``target`` (what ``auto`` chose): its link rate and its
        checks applied to the config as loaded, which is not read or parsed again."""
        data = copy.deepcopy(dict(self.unresolved))
        data["switch"]["target"] = target
        return _expand(data, self.source, self.overridden)

    def with_data_paths(self, chosen: Mapping[int, Mapping[str, DataPath]]) -> Experiment:
        """The same experiment with the data paths of the points in ``chosen`` (by index; by
        protocol name within a point) set."""
        points = tuple(replace(p, chosen_data_paths=chosen[p.index]) if p.index in chosen else p for p in self.points)
        return replace(self, points=points)


def set_dotted(data: dict[str, Any], key: str, value: Any, source: str) -> None:
    """Set ``a.b.c`` in nested mappings, creating missing levels."""
    parts = key.split(".")
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: {'.'.join(parts[: i + 1])} is not a mapping, cannot set {key}")
        node = child
    node[parts[-1]] = value


def parse_set(assignment: str) -> tuple[str, Any]:
    """``key.path=value`` with the value read as YAML (so 8, 0.01, [1, 2] and true are typed)."""
    key, sep, text = assignment.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set {assignment!r}: expected key.path=value")
    return key.strip(), parse_yaml(text, f"--set {assignment!r}: value")


def apply_target_link_rate(data: dict[str, Any], overridden: set[str], source: str) -> str:
    """Run the links at the rate the chosen target keeps up with, where the config asks for it.

    A software switch target has a capacity (updates per second it aggregates without
    losing frames, benchmarks/README.md), and so has the machine that runs the workers.
    ``topology.link.bw_mbps: target`` runs the links at the rate measured on this machine by
    ``run_experiment.py --calibrate`` for the target, the config's k and its workers, where
    the calibration file has one (experiments/calibration/record.py), and otherwise at the
    rate the target's descriptor gives for k (``SwitchTarget.link_rates``: measured with the
    main job on a 2-core machine). ``switch.link_bw_mbps`` overrides it per target (that rate
    also replaces a numeric ``topology.link.bw_mbps`` when that target runs). An explicit
    ``--set`` of the link rate or a sweep of it wins over all. Returns where the rate came
    from, for the run's header and the summary.
    """
    def sets_the_rate(key: str) -> bool:  # topology.link.bw_mbps itself, or a mapping holding it
        return LINK_RATE_KEY == key or LINK_RATE_KEY.startswith(key + ".")

    sweep = data.get("sweep") or {}
    if sets_the_rate(sweep.get("param", "")):
        return f"sweep {sweep['param']}"
    explicit = sorted(key for key in overridden if sets_the_rate(key))
    if explicit and get_dotted(data, LINK_RATE_KEY) != TARGET_RATE:
        return f"--set {explicit[0]}"
    target = data["switch"]["target"]
    rate = data["switch"].get("link_bw_mbps", {}).get(target)
    if rate is not None:
        set_dotted(data, LINK_RATE_KEY, rate, f"{TARGET_LINK_RATES_KEY}.{target}")
        return f"{TARGET_LINK_RATES_KEY}.{target}"
    if get_dotted(data, LINK_RATE_KEY) != TARGET_RATE:
        return LINK_RATE_KEY
    if target not in REGISTRY:  # 'auto': the config is loaded again once the target is known
        set_dotted(data, LINK_RATE_KEY, None, LINK_RATE_KEY)
        return f"{LINK_RATE_KEY}: {TARGET_RATE} (the target's, once auto has chosen it)"
    k = int(data["protocol"]["k"])
    calibrated = find_rate(target, k, most_workers(data, Path(source)), data["protocol"]["data_path"])
    if calibrated.rate is not None:
        set_dotted(data, LINK_RATE_KEY, calibrated.rate.mbps, LINK_RATE_KEY)
        return calibrated.rate.source()
    rate = REGISTRY[target].link_mbps(k)
    why_not = f"; {calibrated.why_not}" if calibrated.why_not else ""
    if rate is None:
        measured = ", ".join(f"k = {key}" for key in sorted(REGISTRY[target].link_rates)) or "no k"
        raise ConfigError(f"{source}: {LINK_RATE_KEY}: {TARGET_RATE}: the {target} target has a measured link rate for {measured}, not "
                          f"k = {k}{why_not}; give the rate in Mbit/s, or measure one with run_experiment.py --calibrate")
    set_dotted(data, LINK_RATE_KEY, rate, LINK_RATE_KEY)
    return f"{TARGET_RATE_SOURCE} {target} at k = {k}{why_not}"


def most_workers(data: Mapping[str, Any], source: Path) -> int | None:
    """The most workers any point of ``data`` has (its sweep's values applied), read before
    the points are resolved, for the calibrated rate; None where a point's count cannot be
    read yet (resolving that point names the mistake)."""
    sweep = data.get("sweep")
    variants = [data]
    if sweep is not None:
        variants = []
        for value in sweep["values"]:
            variant = copy.deepcopy(dict(data))
            try:
                set_dotted(variant, sweep["param"], copy.deepcopy(value), f"{source}: sweep.param")
            except ConfigError:
                return None
            variants.append(variant)
    counts = []
    for variant in variants:
        topology = variant.get("topology")
        workers = topology.get("workers") if isinstance(topology, dict) else None
        if workers is None and isinstance(topology, dict) and isinstance(topology.get("file"), str):
            try:
                written = load_yaml(find_topology(topology["file"], source.parent))
            except ConfigError:
                return None
            workers = written.get("workers") if isinstance(written, dict) else None
        if not isinstance(workers, int) or isinstance(workers, bool):
            return None
        counts.append(workers)
    return max(counts)


def get_dotted(data: Mapping[str, Any], key: str) -> Any:
    """The value at ``a.b.c`` (None where a part is missing)."""
    for part in key.split("."):
        if not isinstance(data, Mapping):
            return None
        data = data.get(part)  # type: ignore[assignment]
    return data


def _check_semantics(data: Mapping[str, Any], topology: Topology, source: str) -> None:
    """Rules that span keys, which a schema cannot say clearly."""
    protocol, switch = data["protocol"], data["switch"]
    if protocol["pool_size"] > switch["max_pool_size"]:
        raise ConfigError(
            f"{source}: protocol.pool_size: {protocol['pool_size']} is larger than the switch's registers "
            f"(switch.max_pool_size = {switch['max_pool_size']})"
        )
    target = REGISTRY.get(switch["target"])  # None: 'auto', checked again once resolved
    if target is not None:
        try:
            target.check_k(protocol["k"])
        except ValueError as error:
            raise ConfigError(f"{source}: protocol.k: {error}") from None
    if target is not None:
        for aggregation in methods.aggregations_of(data["methods"]):
            if aggregation.name not in target.protocols:
                raise ConfigError(f"{source}: methods: the {target.name} target has no data plane for {aggregation.label} "
                                  f"(it runs {', '.join(sorted(target.protocols)) or 'no in-network aggregation'})")
    if not data.get("jobs"):  # shared-switch points give each job its own pool (experiments/kinds/shared_switch.py)
        for aggregation in methods.aggregations_of(data["methods"]):
            try:  # what the protocol's record refuses of the section (ATP: a window beyond pool_size), here and not mid-run
                aggregation.parameters(protocol, None)
            except ValueError as error:
                raise ConfigError(f"{source}: {error}") from None
    if target is not None and target.max_pool_size is not None and switch["max_pool_size"] > target.max_pool_size:
        raise ConfigError(f"{source}: switch.max_pool_size: the {target.name} program is built with {target.max_pool_size} slots")
    workload_of(data["workload"]).check(data, len(topology.hosts), source)
    _check_ddp_methods(data, source)
    if data["loss_mechanism"] == "switch":
        try:
            topology.drop_simulator_rates()
        except ValueError as exc:
            raise ConfigError(f"{source}: loss_mechanism: {exc}") from None
    if data.get("cluster") is not None:
        try:
            ClusterSpec.from_config(data["cluster"]).check(topology)
        except ValueError as exc:
            raise ConfigError(f"{source}: {exc}") from None
    offered = available_congestion_controls()
    if offered and data["tcp_congestion_control"] not in offered:
        raise ConfigError(f"{source}: tcp_congestion_control: {data['tcp_congestion_control']!r} is not one this kernel offers "
                          f"({', '.join(offered)}: net.ipv4.tcp_available_congestion_control)")


def check_data_paths(experiment: Experiment) -> None:
    """Refuse, as a ConfigError naming the point, a data path its config insists on that this
    machine cannot run (``protocol.data_path: native`` without a C compiler). Resolving
    builds the native loop (cached), so the runner asks this once the target is chosen,
    before anything starts, and loading a config builds nothing."""
    for point in experiment.points:
        for protocol in methods.aggregations_of(point.methods):
            try:
                point.data_path_of(protocol)
            except DataPathUnavailable as exc:
                raise ConfigError(f"{point_label(experiment.source, point)}: protocol.data_path: {point.job.data_path}: {protocol.label}: {exc}; "
                                  "'auto' runs the Python worker where it is") from None


def data_path_protocol(method_names: list[str] | tuple[str, ...]) -> Aggregation:
    """The protocol whose worker loop summary.json records: the first in-network method's that
    has a choice of loop, else the first in-network method's (its loop on the simulated
    clock), else the first registered protocol's with a choice (what results have always
    recorded for a point with none)."""
    own = methods.aggregations_of(method_names)
    return next((protocol for protocol in own if protocol.data_path is not None), own[0] if own else first_with_a_choice())


def first_with_a_choice() -> Aggregation:
    """The first registered protocol whose worker has a choice of loop: whose resolution a
    protocol without one follows."""
    return next(protocol for protocol in methods.AGGREGATIONS if protocol.data_path is not None)


AVAILABLE_CONGESTION_CONTROLS = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")


def available_congestion_controls() -> list[str]:
    """The TCP congestion controls this kernel offers (empty where it does not say: not Linux)."""
    try:
        return AVAILABLE_CONGESTION_CONTROLS.read_text().split()
    except OSError:
        return []


def check_emulable(experiment: Experiment) -> None:
    """Refuse, naming the point and the limit, a point with more hosts than an emulated run
    takes (``MAX_EMULATED_HOSTS``) or tensors it has no memory for (``EMULATED_MEMORY``), or a
    config written for the simulated clock only (``clock: simulated``); run_experiment.py
    checks it for every run but --simulate."""
    for point in experiment.points:
        hosts = len(point.topology.hosts)
        where = point_label(experiment.source, point)
        if hosts > MAX_EMULATED_HOSTS:
            raise ConfigError(f"{where}: topology.workers: {hosts} hosts; an emulated run takes at most {MAX_EMULATED_HOSTS} "
                              "(experiments/config.py, MAX_EMULATED_HOSTS); --simulate runs larger topologies (up to the topology "
                              "schema's 512 workers)")
        check_memory(_jobs(point.data, point.topology), EMULATED_MEMORY, where)
    if experiment.data.get("clock") == "simulated":
        raise ConfigError(f"{experiment.source}: clock: simulated: this config is written for the simulated clock (its links are faster "
                          "than emulation carries); run it with --simulate")


def _jobs(data: Mapping[str, Any], topology: Topology) -> list[tuple[int, int]]:
    """(elements, workers) of every all-reduce a point runs at once."""
    if data.get("jobs") is None:
        return [(describe_workload(data["workload"]).elements, len(topology.hosts))]
    default = data["workload"].get("elements", 0)
    return [(job.get("elements", default), len(job["hosts"])) for job in data["jobs"]]


def _check_feasible(data: Mapping[str, Any], topology: Topology, source: str) -> None:
    """Refuse a point this machine cannot run, which would otherwise fail after building
    the network (a MemoryError, a missed deadline): its tensors must fit in memory, and
    every method's fastest possible all-reduce -- one round trip, and the elements at the
    method's link-rate bound (methods/) -- must fit in limits.job_timeout_s, where the config
    sets it (a derived deadline is several times that by construction)."""
    jobs = _jobs(data, topology)
    check_memory(jobs, SIMULATED_MEMORY, source)  # the lesser: what a run on either clock needs; check_emulable checks the other
    timeout = data["limits"].get("job_timeout_s")
    if timeout is None:
        return
    link_mbps = topology.link_mbps
    for elements, workers in jobs:
        for name in data["methods"]:
            fastest = fastest_allreduce_s(name, elements, workers, topology, data["protocol"]["k"]) or topology.round_trip_s
            if fastest > timeout:
                rate = f"{link_mbps:g} Mbit/s" if link_mbps is not None else "unshaped"
                raise ConfigError(
                    f"{source}: limits.job_timeout_s: {timeout:g} s is too short for {name}: its all-reduce of {elements:,} elements "
                    f"over {workers} workers takes at least {fastest:.3g} s on these links ({rate}, {topology.round_trip_s * 1000:g} ms "
                    f"round trip); raise limits.job_timeout_s, or make the links faster or the tensor smaller"
                )


def check_memory(jobs: list[tuple[int, int]], model: MemoryModel, source: str) -> None:
    """Refuse tensors whose run would outgrow the memory this process may use (``memory_limit``:
    the machine's, or its memory cgroup's, as in a container), where the kernel's OOM killer
    would end it with no word of why."""
    needed = model.needed(jobs)
    memory, limited_by = memory_limit()
    if needed > memory:
        raise ConfigError(
            f"{source}: workload.elements: {' + '.join(f'{e:,} elements x {w} workers' for e, w in jobs)} need about "
            f"{needed / 1e9:.1f} GB of memory {model.clock} ({model.bytes_per_element} bytes per element and worker and "
            f"{model.base_bytes / 1e9:.2g} GB besides); {limited_by} is {memory / 1e9:.1f} GB"
        )


def _check_ddp_methods(data: Mapping[str, Any], source: str) -> None:
    """A workload trained through DDP runs only the methods that give DDP a communication hook."""
    workload = workload_of(data["workload"])
    if not workload.through_ddp:
        return
    without = [name for name in data["methods"] if methods.by_name(name).ddp_hook is None]
    if without:
        with_hook = [method.name for method in methods.REGISTRY if method.ddp_hook is not None]
        raise ConfigError(f"{source}: methods: a {workload.name} training all-reduces through DDP with {' or '.join(with_hook)}, "
                          f"got {', '.join(data['methods'])}")


def with_defaults(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` over the defaults (DEFAULTS, its workload kind's, and the own sections of the
    protocols its methods run: ATP's ``protocol.atp``), so that a section given
    whole (``--set limits={...}``, a sweep over ``workload``) keeps the defaults of the keys it
    does not name, and the resolved config.yaml records them; DEFAULTS are copied, so no load
    changes them."""
    merged = deep_merge(copy.deepcopy(DEFAULTS), data)
    named = merged.get("methods")
    if isinstance(named, list) and isinstance(merged.get("protocol"), dict):  # else the schema names the mistake
        for protocol in methods.aggregations_of([name for name in named if name in methods.NAMES]):
            merged["protocol"] = deep_merge(copy.deepcopy(dict(protocol.section_defaults)), merged["protocol"])
    workload = merged.get("workload")
    if isinstance(workload, dict) and isinstance(workload.get("kind"), str):  # else the schema names the mistake
        if workload["kind"] in workloads.kinds.names():
            for key, value in workload_of(workload).defaults.items():
                workload.setdefault(key, copy.deepcopy(value))
    return merged


def _check_rate_applies(data: Mapping[str, Any], topology_path: Path, link_rate_source: str, label: str) -> None:
    """A per-target link rate (switch.link_bw_mbps, or the target's own) sets topology.link, which only generated
    topologies (star, tree) have: an explicit one sets each link's rate in its own links.
    Refused naming the key that set it, not the topology.link the user never wrote."""
    if not link_rate_source.startswith((TARGET_LINK_RATES_KEY, TARGET_RATE_SOURCE, CALIBRATED_RATE_SOURCE)):
        return
    topology = load_yaml(topology_path)
    kind = data["topology"].get("kind", topology.get("kind") if isinstance(topology, dict) else None)
    if kind == "explicit":
        raise ConfigError(
            f"{label}: {link_rate_source}: {topology_path.name} is an explicit topology, whose links set their own rates "
            f"(links[].bw_mbps); give the rate there, or use a star or tree topology"
        )


def point_label(source: Path, point: Point) -> str:
    """How an error names a point: the config, and the sweep value where there is one."""
    return _label(source, point.sweep_param, point.sweep_value)


def _label(source: Path, sweep_param: str | None, sweep_value: Any) -> str:
    return str(source) if sweep_param is None else f"{source} (sweep {sweep_param} = {sweep_value!r})"


def _resolve_point(data: dict[str, Any], source: Path, index: int, sweep_param: str | None, sweep_value: Any,
                   link_rate_source: str = LINK_RATE_KEY) -> Point:
    label = _label(source, sweep_param, sweep_value)
    validate(data, experiment_schema(), label)
    workload = data["workload"]
    reject_keys(workload, workload_of(workload).keys, f"workload kind {workload['kind']}", label, "workload.")
    topology_keys = {k: v for k, v in data["topology"].items() if k != "file"}
    try:
        topology_path = find_topology(data["topology"]["file"], source.parent)
    except ConfigError as exc:
        raise ConfigError(f"{label}: topology.file: {exc}") from None
    _check_rate_applies(data, topology_path, link_rate_source, label)
    topology = load_topology(topology_path, topology_keys, context=label)
    _check_semantics(data, topology, label)
    _check_feasible(data, topology, label)
    return Point(index=index, sweep_param=sweep_param, sweep_value=sweep_value, data=data, topology=topology)


def unavailable_here(data: Mapping[str, Any], path: Path) -> tuple[str, ...]:
    """What this machine lacks to run the config's methods and workload (gloo, or a torch
    training, without PyTorch), one line each naming how to get it: a run is refused with the
    first as the config loads, rather than after the network is built, on eight hosts."""
    lines = [f"{path}: methods: {name} {reason}" for name in data["methods"]
             if (reason := methods.by_name(name).unavailable()) is not None]
    if (reason := workload_of(data["workload"]).unavailable()) is not None:
        lines.append(f"{path}: workload.kind: {data['workload']['kind']} {reason}")
    return tuple(lines)


def _check_sweep(sweep: Mapping[str, Any], overridden: set[str], source: Path) -> None:
    """A sweep that would run points other than the ones written: one over the sweep itself
    (its points would replace the sweep they belong to), one over a key that --set also sets
    (the sweep's values would silently replace the user's), or one that lists a value twice
    (the same point run twice, under two indices)."""
    param = sweep["param"]
    if param == "sweep" or param.startswith("sweep."):
        raise ConfigError(f"{source}: sweep.param: {param!r}: a sweep cannot vary the sweep itself")
    for key in sorted(overridden):
        if key == "sweep" or key.startswith("sweep."):
            continue
        if key == param or key.startswith(param + ".") or param.startswith(key + "."):
            raise ConfigError(f"{source}: --set {key}: the sweep varies {param}, and its values would replace what --set "
                              f"gives; set sweep.values instead, or leave {key} out")
    seen: list[Any] = []
    for value in sweep["values"]:
        if value in seen:
            raise ConfigError(f"{source}: sweep.values: {value!r} appears twice; each point runs once")
        seen.append(value)


def load_experiment(path: Path, overrides: list[str] | tuple[str, ...] = (), text: str | None = None, *,
                    dry_run: bool = False) -> Experiment:
    """Read a config, apply defaults and ``--set`` overrides, and expand its sweep into points.

    ``text``: the config's text, read already (``read_yaml_text``: a pipe or standard input
    can be read only once), with ``path`` naming it. A config that needs what this machine
    lacks (PyTorch) is refused, unless for a ``dry_run``: planning a run needs no PyTorch, and
    the experiment's ``unavailable`` then says what a run would need."""
    raw = parse_yaml(text, str(path)) if text is not None else load_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: an experiment config must be a mapping")
    overridden = set()
    for assignment in overrides:
        key, value = parse_set(assignment)
        set_dotted(raw, key, value, f"--set {assignment}")
        overridden.add(key)
    data = with_defaults(raw)  # under the overrides: a --set of a whole section keeps the others' defaults
    data.setdefault("name", "stdin" if path == STDIN else path.stem)
    validate(data, experiment_schema(), str(path))
    unavailable = unavailable_here(data, path)
    workload = workload_of(data["workload"])
    if unavailable and not (dry_run and (workload.unavailable() is None or workload.plans_without_it)):
        raise ConfigError(unavailable[0])
    if data["name"] in (".", ".."):
        raise ConfigError(f"{path}: name: {data['name']!r} would put the results outside results/; name the experiment")
    if data.get("cluster", {}).get("ssh_config") is not None:  # relative to the config, recorded absolute
        data["cluster"]["ssh_config"] = str((path.parent / data["cluster"]["ssh_config"]).resolve())
    resolve_workload_files(data, path)
    if data.get("sweep") is not None:
        _check_sweep(data["sweep"], overridden, path)
    return replace(_expand(data, path, frozenset(overridden)), unavailable=unavailable)


TRACE_FILE_SUFFIXES = (".yaml", ".yml", ".csv")
"""A ``workload.model`` ending in one of these is a file; without, a shipped trace's name."""


def resolve_workload_files(data: dict[str, Any], config: Path) -> None:
    """``workload.script`` and a ``workload.model`` file, found as ``topology.file`` is: next to
    the config first, then in the current folder; recorded absolute (config.yaml then resumes
    from anywhere). A file found nowhere is left as written, for its check to name."""
    workload = data.get("workload")
    if not isinstance(workload, dict):
        return
    for key in ("script", "model"):
        value = workload.get(key)
        if not isinstance(value, str) or (key == "model" and not value.endswith(TRACE_FILE_SUFFIXES)) or Path(value).is_absolute():
            continue
        found = next((candidate for candidate in (config.parent / value, Path(value)) if candidate.is_file()), None)
        if found is not None:
            workload[key] = str(found.resolve())


def _expand(data: dict[str, Any], path: Path, overridden: frozenset[str]) -> Experiment:
    """A loaded config with its target's link rate applied, expanded into its sweep points."""
    unresolved = copy.deepcopy(data)
    link_rate_source = apply_target_link_rate(data, set(overridden), str(path))
    sweep = data.get("sweep")
    points: list[Point] = []
    if sweep is None:
        points.append(_resolve_point(copy.deepcopy(data), path, 0, None, None, link_rate_source))
    else:
        for index, value in enumerate(sweep["values"]):
            point_data = copy.deepcopy(data)
            set_dotted(point_data, sweep["param"], copy.deepcopy(value), f"{path}: sweep.param")
            resolve_workload_files(point_data, path)  # a sweep over workload.model or workload.script
            # Again: a sweep value that is a whole section (workload, limits) replaced the defaults in it.
            points.append(_resolve_point(with_defaults(point_data), path, index, sweep["param"], value, link_rate_source))
    return Experiment(name=data["name"], source=path, data=data, points=tuple(points), link_rate_source=link_rate_source,
                      unresolved=unresolved, overridden=overridden)
