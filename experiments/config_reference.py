"""The configuration reference (docs/configuration.md), generated from the schemas a config is
validated against, so that the page cannot drift from what the loader accepts.

    python -m experiments.config_reference           # rewrite docs/configuration.md
    python -m experiments.config_reference --check   # exit 1 if it is stale

The keys come from ``experiment_schema()`` (configs/experiment.schema.yaml with the registered
methods, targets and workload kinds filled in) and from topologies/topology.schema.yaml, whose
keys a config's ``topology:`` section overrides. Each key's meaning is its schema
``description``; its default is the loader's (``DEFAULTS``, a workload kind's ``defaults``, a protocol's
``section_defaults``).
The documentation site's build (docs/hooks.py) renders the page from here too.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import workloads.kinds
from base.yamlschema import load_schema
import methods
from experiments.config import DEFAULTS, LINK_RATE_KEY, TARGET_RATE, experiment_schema
from topologies.model import SCHEMA_PATH as TOPOLOGY_SCHEMA_PATH

TOP_LEVEL = "top-level keys"
REPO_ROOT = Path(__file__).resolve().parent.parent
PAGE = REPO_ROOT / "docs" / "configuration.md"

CONSTRAINTS = (("minimum", "≥ {}"), ("exclusiveMinimum", "> {}"), ("maximum", "≤ {}"), ("exclusiveMaximum", "< {}"),
               ("minItems", "at least {} items"), ("maxItems", "at most {} items"), ("pattern", "matching `{}`"))


@dataclass(frozen=True)
class Key:
    """One documented key: its dotted path (``jobs[].hosts`` for an item of a list)."""

    path: str
    schema: dict[str, Any]
    default: Any = None
    note: str = ""


def walk(schema: dict[str, Any], root: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property under ``schema``, depth first, with local ``$ref``s resolved and the items
    of a list of objects walked as ``key[].``."""
    for name, sub in schema.get("properties", {}).items():
        sub = resolve(sub, root)
        path = f"{prefix}{name}"
        yield path, sub
        if sub.get("properties"):
            yield from walk(sub, root, f"{path}.")
        items = resolve(sub.get("items", {}), root)
        if items.get("properties"):
            yield from walk(items, root, f"{path}[].")


def resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a local ``$ref`` (``#/$defs/link``) replaced by what it points to."""
    ref = schema.get("$ref")
    if not ref:
        return schema
    target: Any = root
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    return {**resolve(target, root), **{k: v for k, v in schema.items() if k != "$ref"}}


def default_of(path: str) -> Any:
    """The loader's default for a dotted path (None where it has none)."""
    value: Any = {**DEFAULTS, "protocol": {**DEFAULTS["protocol"],
                                           **{key: section for protocol in methods.AGGREGATIONS for key, section in protocol.section_defaults.items()}}}
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def experiment_keys() -> list[Key]:
    """The experiment config's keys; a workload kind's own keys name the kinds that take them."""
    takers: dict[str, list[str]] = {}
    defaults: dict[str, Any] = {}
    for kind in workloads.kinds.REGISTRY:
        for name in kind.properties:
            takers.setdefault(name, []).append(kind.name)
            if name in kind.defaults:
                defaults[name] = kind.defaults[name]
    schema = experiment_schema()
    keys = []
    for path, sub in walk(schema, schema):
        section, _, name = path.partition(".")
        if section == "workload" and name in takers:
            keys.append(Key(path, sub, defaults.get(name), f"kind {', '.join(takers[name])}"))
        else:
            keys.append(Key(path, sub, default_of(path)))
    return keys


def topology_keys() -> list[Key]:
    """A topology file's keys, which a config's ``topology:`` section overrides."""
    schema = load_schema(TOPOLOGY_SCHEMA_PATH)
    keys = [Key(f"topology.{path}", sub) for path, sub in walk(schema, schema)]
    return [configured_rate(key) if key.path == LINK_RATE_KEY else key for key in keys]


def configured_rate(key: Key) -> Key:
    """A config's ``topology.link.bw_mbps`` also takes ``target`` (experiments/config.py)."""
    schema = dict(key.schema)
    schema["description"] = (f"{schema.get('description', '')}; in a config also `{TARGET_RATE}`: the rate the switch "
                             "target keeps up with at the config's k, measured on this machine by `run_experiment.py --calibrate` "
                             "(results/calibration.yaml) where it has been, else the shipped one (`link_rates` in "
                             "switches/<target>/__init__.py); a k with neither is refused (docs/targets.md)")
    return Key(key.path, schema, key.default, key.note)


def values(schema: dict[str, Any]) -> str:
    """What a key accepts, from its type, enum and bounds."""
    if "enum" in schema:
        return ", ".join(f"`{json.dumps(v)}`" if not isinstance(v, str) else f"`{v}`" for v in schema["enum"])
    kinds = schema.get("type", "")
    text = " or ".join(kinds) if isinstance(kinds, list) else kinds
    if kinds == "array" and isinstance(schema.get("items"), dict) and "type" in schema["items"]:
        item = schema["items"]["type"]
        text = f"list of {' or '.join(item) if isinstance(item, list) else item}"
    bounds = [template.format(schema[name]) for name, template in CONSTRAINTS if name in schema]
    return ", ".join([text, *bounds]) if text else ", ".join(bounds)


def row(key: Key, required: bool) -> str:
    section = key.schema.get("type") == "object"  # its keys' defaults are on their own rows
    default = "" if key.default is None or section else f"`{json.dumps(key.default)}`"
    meaning = " ".join(key.schema.get("description", "").split())
    notes = [note for note in (key.note, "required" if required else "") if note]
    if notes:
        meaning = f"({'; '.join(notes)}) {meaning}"
    return f"| `{key.path}` | {escape(values(key.schema))} | {default} | {escape(meaning)} |"


def escape(text: str) -> str:
    """Table-cell text: a pipe would end the cell, and <name> would read as an HTML tag."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def required_paths(schema: dict[str, Any], prefix: str = "") -> set[str]:
    """Dotted paths the schema requires outright (not the keys a workload kind requires)."""
    found = {f"{prefix}{name}" for name in schema.get("required", [])}
    for name, sub in schema.get("properties", {}).items():
        found |= required_paths(sub, f"{prefix}{name}.")
        if isinstance(sub.get("items"), dict):
            found |= required_paths(sub["items"], f"{prefix}{name}[].")
    return found


def render() -> str:
    """The whole page."""
    schema = experiment_schema()
    required = required_paths(schema)
    header = ["| key | values | default | meaning |", "|---|---|---|---|"]
    sections: dict[str, list[str]] = {TOP_LEVEL: []}
    for key in experiment_keys():
        top = key.path.split(".")[0].split("[")[0]
        nested = any(part.get("properties") for part in (schema["properties"][top], schema["properties"][top].get("items", {})))
        sections.setdefault(top if nested else TOP_LEVEL, []).append(row(key, key.path in required))
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m experiments.config_reference` from configs/experiment.schema.yaml,",
        "     the registries and topologies/topology.schema.yaml. Do not edit: tests/test_docs.py fails when stale. -->",
        "",
        "An experiment config is a YAML file in `configs/`. Every key is checked against the schema as",
        "the config loads. A mistake is reported with the file and the key, and unknown keys are errors.",
        "`--set key=value` overrides any key, typed as YAML (`--set topology.workers=4`). The resolved",
        "config, defaults filled in, is written to each run's `config.yaml`.",
        "",
        "A key under a list is written `list[].key`. A workload kind's own keys say which kinds take them.",
    ]
    for section, rows in sections.items():
        lines += ["", f"## {section}", "", *header, *rows]
    lines += [
        "",
        "## topology file",
        "",
        "A config's `topology.file` names a topology file (`topologies/star.yaml`, `tree.yaml`,",
        "`explicit-pair.yaml`). Every other key under a config's `topology:` overrides that file's key",
        "of the same name, e.g. `--set topology.link.bw_mbps=5`. A topology file's keys:",
        "",
        *header,
        *(row(key, False) for key in topology_keys() if key.path != "topology.file"),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.config_reference", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help=f"exit 1 if {PAGE.relative_to(REPO_ROOT)} is stale")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        if PAGE.read_text() != page:
            print(f"{PAGE.relative_to(REPO_ROOT)} is stale: run python -m experiments.config_reference", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
