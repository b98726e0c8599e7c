"""The import graph: packages stack in layers, and no module imports itself round a cycle.

The folders follow the data (docs/architecture.md, "How the pieces fit"), and a package may import only
packages of a lower layer: a switch target never reaches into the emulated network, the
hosts never into the runner, the analysis never into the code that writes the results it
reads. Every import counts, also one inside a function or under ``TYPE_CHECKING``: a lazy
import still ties the two modules together. A new top-level package must be given a layer
here, so the map stays complete.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from protocol.params import REPO_ROOT
import methods
from switches.targets import PACKAGES, REGISTRY

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

LAYERS: tuple[tuple[str, ...], ...] = (
    ("base", "switchml_testbed"),  # the ground floor: YAML + schema, process lifetime, Linux sockets, namespaces;
    # the release (version, commit; switchml_testbed/cli.py runs the commands by name, importing none of them)
    ("protocol",),  # contracts both sides of a boundary share: wire format, job plan
    ("topologies", "workloads", "p4", "switches", "methods"),  # methods: the all-reduce methods' registry
    ("network",),
    ("hosts",),
    ("simulation",),  # the hosts' and switches' own code on a simulated clock (SimPy)
    ("experiments",),  # the runner and the results it writes
    ("analysis",),  # reads the results: above what writes them
    ("labs", "benchmarks", "run_experiment", "examples", "docs", "setup"),  # examples: scripts of a user's, run by the testbed; docs: the site's build hooks; setup: the wheel's build
    ("tests",),
)
"""Lowest first. A package imports only packages of lower layers (its own excepted)."""

LAYER_OF = {package: level for level, packages in enumerate(LAYERS) for package in packages}
SKIPPED_DIRS = {".venv", ".git", "results", "build", "node_modules", "__pycache__"}


def python_files() -> list[Path]:
    return sorted(
        path for path in REPO_ROOT.rglob("*.py") if not SKIPPED_DIRS.intersection(path.relative_to(REPO_ROOT).parts)
    )


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The project's modules ``path`` imports (``from a import b`` counts a.b if b is a module)."""
    found: set[str] = set()
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                found.add(name)
    return found


def import_graph() -> dict[str, set[str]]:
    files = python_files()
    modules = {module_name(path) for path in files}
    return {module_name(path): imported_modules(path, modules) - {module_name(path)} for path in files}


GRAPH = import_graph()


def top(module: str) -> str:
    return module.split(".")[0]


def test_every_top_level_package_has_a_layer() -> None:
    unplaced = sorted({top(module) for module in GRAPH} - set(LAYER_OF))
    assert not unplaced, f"give these top-level packages a layer in tests/test_layers.py: {', '.join(unplaced)}"


def test_no_package_imports_a_higher_or_equal_layer() -> None:
    offending = sorted(
        f"{module} imports {target} ({top(module)} is layer {LAYER_OF[top(module)]}, {top(target)} layer {LAYER_OF[top(target)]})"
        for module, targets in GRAPH.items()
        for target in targets
        if top(target) != top(module) and top(module) in LAYER_OF and top(target) in LAYER_OF
        and LAYER_OF[top(target)] >= LAYER_OF[top(module)]
    )
    assert not offending, "imports that run upward or sideways:\n" + "\n".join(offending)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    # An import of a.b runs a/__init__.py first: a module importing its own parent package is
    # no cycle, so those edges are left out.
    graph = {module: {t for t in targets if not module.startswith(t + ".")} for module, targets in GRAPH.items()}
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(component) for component in found)


def test_the_graph_sees_known_imports() -> None:
    """The parser finds plain, from- and function-local imports (the test would pass vacuously otherwise)."""
    assert "base.yamlschema" in GRAPH["topologies.model"]
    assert "protocol.switchml.plan" in GRAPH["hosts.switchml.core"]
    assert "hosts.switchml.native.job" in GRAPH["hosts.switchml.native"]  # imported inside a function


TORCH_MODULES = {"workloads.torch_cnn", "hosts.torch_backend", "hosts.torch_hook", "hosts.torch_training", "hosts.ddp_script", "hosts.ddp_shapes",
                 "experiments.kinds.torch_replay", "examples.ddp_digits", "examples.ddp_tutorial",
                 "tests.data.ddp_unused_parameters", "tests.data.ddp_tutorial_spawn"}
"""The modules that import PyTorch (the optional extra) as they load: only the torch
workloads' own, which the others import inside the functions that need them."""


def top_level_imports(path: Path) -> set[str]:
    """Modules ``path`` imports as it loads: module-level statements, not functions or TYPE_CHECKING blocks."""
    found: set[str] = set()
    for node in ast.parse(path.read_text(), filename=str(path)).body:
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_only_the_torch_modules_import_pytorch_as_they_load() -> None:
    """Everything else, the tests too, imports without PyTorch installed: torch is never a default dependency."""
    offending = sorted(
        f"{module_name(path)} imports {name}"
        for path in python_files() if module_name(path) not in TORCH_MODULES
        for name in top_level_imports(path) if name == "torch" or name.startswith("torch.") or name in TORCH_MODULES
    )
    assert not offending, "PyTorch imported at load time outside the torch modules:\n" + "\n".join(offending)
    assert "torch" in top_level_imports(REPO_ROOT / "workloads" / "torch_cnn.py")  # the scan sees them


TARGET_PACKAGES = tuple(PACKAGES)
"""switches/<t>/: each switch target's own sub-package (switches/targets.py)."""
TARGET_NAMES = frozenset(REGISTRY)
MAY_NAME_TARGETS = ("tests", "labs")
"""Packages that may name a target: the tests (each target's own), and the labs, whose
handouts teach the embedded switch's code (the student writes its ingress)."""


def target_package(module: str) -> str | None:
    return next((package for package in TARGET_PACKAGES if module == package or module.startswith(package + ".")), None)


def test_a_switch_target_is_imported_only_by_its_own_package_and_the_registry() -> None:
    """Sub-packages too: what a target knows stays in switches/<t>/, which only switches/targets.py
    lists; everything else reads the descriptor (SwitchTarget)."""
    offending = sorted(
        f"{module} imports {name}"
        for module, imported in GRAPH.items() if top(module) not in MAY_NAME_TARGETS and module != "switches.targets"
        for name in imported
        if (owner := target_package(name)) is not None and target_package(module) != owner
    )
    assert not offending, "imports of a switch target's package from outside it:\n" + "\n".join(offending)


def code_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of ``path`` that are not docstrings or comments-as-strings (prose)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose]


def test_no_code_outside_a_targets_package_names_a_target() -> None:
    """No string a program acts on names a target outside switches/<t>/ (prose may: docs say
    what was measured where); so a fifth target gets every message, rate and choice the
    others get, from its descriptor."""
    offending = sorted(
        f"{path.relative_to(REPO_ROOT)}:{line}: {text[:80]!r}"
        for path in python_files()
        if (module := module_name(path)) != "switches.targets" and top(module) not in MAY_NAME_TARGETS
        and target_package(module) is None
        for line, text in code_strings(path) if TARGET_NAMES & set(re.findall(r"[a-z0-9]+", text))
    )
    assert not offending, "target names in code outside the targets' packages:\n" + "\n".join(offending)


PROTOCOLS = frozenset({protocol.name for protocol in methods.AGGREGATIONS}
                      | {path.name for path in (REPO_ROOT / "protocol").iterdir() if (path / "__init__.py").is_file()})
"""The in-network aggregation protocols: the registered ones (methods.AGGREGATIONS) and any with
its wire format in a folder of its own (protocol/<p>/: ATP's, before it is registered)."""
PROTOCOL_REGISTRIES = frozenset({"methods", *TARGET_PACKAGES})
"""The modules whose lines register a protocol: the methods' registry (its record, its method)
and each target's descriptor (the protocols it has a data plane for)."""
MAY_NAME_PROTOCOLS = ("tests", "labs")
"""As for targets: the tests, and the labs, whose handouts teach SwitchML's code by name."""
PROJECT_NAME = re.compile(r"switchml[-_](?=testbed|net-|agent-|ssh-|bmv2-|network_holder|leftovers_record|calibration|require_|worker_spec|$)")
"""The project's own names, which begin like the protocol's (its package switchml_testbed, its
commands switchml-<command>, its scratch files and its environment, SWITCHML_WORKER_SPEC among it): not the protocol."""

def protocol_of(module: str) -> str | None:
    """The protocol whose own files ``module`` is one of: a folder (or file) of any layer
    named after it (hosts/switchml/, protocol/atp/, switches/embedded/atp/, methods/switchml.py)."""
    return next((part for part in module.split(".") if part in PROTOCOLS), None)


def protocol_crossings(graph: dict[str, set[str]], strings: dict[str, list[tuple[int, str]]]) -> dict[str, list[str]]:
    """Module -> how it imports or names a protocol whose files it is not one of (registries,
    tests and labs excepted)."""
    found: dict[str, list[str]] = {}
    for module in sorted(set(graph) | set(strings)):
        if top(module) in MAY_NAME_PROTOCOLS or module in PROTOCOL_REGISTRIES:
            continue
        own = protocol_of(module)
        crossings = [f"imports {name}" for name in sorted(graph.get(module, ())) if protocol_of(name) not in (None, own)]
        crossings += [f"line {line} names {name}: {text[:60]!r}" for line, text in strings.get(module, ())
                      for name in sorted(PROTOCOLS & set(re.findall(r"[a-z0-9]+", PROJECT_NAME.sub("", text.lower())))) if name != own]
        if crossings:
            found[module] = crossings
    return found


STRINGS = {module_name(path): code_strings(path) for path in python_files()}
CROSSINGS = protocol_crossings(GRAPH, STRINGS)


def test_no_file_outside_a_protocols_own_imports_or_names_it() -> None:
    """What a protocol is stays in its folders (protocol/<p>/, hosts/<p>/, switches/<t>/<p>/,
    methods/<p>.py); everything else asks its record (methods/aggregation.py), so a new
    protocol is new folders plus registry lines."""
    offending = sorted(f"{module}: {crossing}" for module, crossings in CROSSINGS.items() for crossing in crossings)
    assert not offending, "a protocol imported or named outside its own files:\n" + "\n".join(offending)


def test_the_protocol_rule_catches_a_planted_import_and_a_planted_name() -> None:
    """The rule checked by mutation: a module of the runner that imports ATP's worker, one that
    names it in a string, and one of SwitchML's hosts that imports ATP's, are each caught; the
    protocols' own cross-imports of shared code and the registries are not."""
    graph = {**GRAPH, "experiments.planted": {"hosts.atp.worker"}, "hosts.switchml.planted": {"protocol.atp.packet"},
             "hosts.atp.planted": {"protocol.atp.packet", "hosts.stats"}, "methods": {"methods.atp"}}
    strings = {**STRINGS, "network.planted": [(1, "python -m hosts.atp")], "hosts.atp.named": [(1, "atp")],
               "network.project": [(1, "/tmp/switchml-net-")]}
    planted = protocol_crossings(graph, strings)
    assert planted["experiments.planted"] == ["imports hosts.atp.worker"]
    assert planted["hosts.switchml.planted"] == ["imports protocol.atp.packet"]
    assert planted["network.planted"] == ["line 1 names atp: 'python -m hosts.atp'"]
    assert not {"hosts.atp.planted", "hosts.atp.named", "methods", "network.project"} & set(planted)
    assert (protocol_of("hosts.switchml.core"), protocol_of("switches.embedded.atp.pipeline"), protocol_of("hosts.allreduce")) == (
        "switchml", "atp", None)
