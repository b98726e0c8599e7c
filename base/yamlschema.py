"""Loading YAML files validated against a JSON Schema, with errors a user can act on.

Every config and topology goes through here, so every mistake is reported the same way:
the file, the dotted key, and what was expected ("configs/x.yaml: protocol.k: 0 is less
than the minimum of 1"; unknown keys are named as such).

Numbers are held to what the code that uses them can take, more strictly than JSON
Schema's own types: an ``integer`` is an int (JSON Schema counts 8.0 as one, but range(8.0)
fails), and a ``number`` is finite (YAML's .nan and .inf pass every minimum and maximum,
since no comparison with NaN is true, and would reach tc, timers and summary.json).
"""

from __future__ import annotations

import copy
import functools
import math
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml


class ConfigError(ValueError):
    """A config or topology file that is missing, unreadable or does not fit its schema."""


def dotted(path: Any) -> str:
    """jsonschema's error path as 'protocol.k' or 'links[2].bw_mbps' ('<top level>' if empty)."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "<top level>"


def _is_integer(checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_number(checker: Any, instance: Any) -> bool:
    return isinstance(instance, (int, float)) and not isinstance(instance, bool) and math.isfinite(instance)


Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number}),
)
"""Draft 2020-12 with integers that are ints and numbers that are finite (see the module doc)."""


def _describe(error: jsonschema.ValidationError, key_prefix: str) -> str:
    where = key_prefix + dotted(error.absolute_path) if error.absolute_path else (key_prefix.rstrip(".") or dotted([]))
    if error.validator == "type" and isinstance(error.instance, float):
        if not math.isfinite(error.instance):
            return f"{where}: {error.instance} is not a finite number"
        if "integer" in ([error.validator_value] if isinstance(error.validator_value, str) else error.validator_value):
            return f"{where}: {error.instance!r} is not an integer (write {int(error.instance)})" if error.instance.is_integer() \
                else f"{where}: {error.instance!r} is not an integer"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        unknown = sorted(set(error.instance) - set(allowed))
        return f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}"
    return f"{where}: {error.message}"


def load_schema(schema_path: Path) -> dict[str, Any]:
    """A JSON Schema file, checked against the metaschema once per content (planning a
    config loads the experiment schema for every point). The caller's copy is its own to
    fill in."""
    return copy.deepcopy(_checked_schema(schema_path.read_text(), str(schema_path)))


@functools.lru_cache(maxsize=16)
def _checked_schema(text: str, source: str) -> dict[str, Any]:
    schema = yaml.safe_load(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema


def validate(data: Any, schema: dict[str, Any], source: str, key_prefix: str = "") -> None:
    """Raise ConfigError naming ``source`` and every offending key (on one line), or return quietly.

    ``key_prefix`` places a nested document in its parent ('topology.' for a topology
    overridden from an experiment config), so the key named is the one the user wrote.
    """
    validator = Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))))
    if errors:
        raise ConfigError(f"{source}: " + "; ".join(_describe(e, key_prefix) for e in errors))  # one line, however many


MAX_YAML_BYTES = 4 << 20
"""A config, topology or trace file is far smaller (the largest shipped one, a trace of
BERT-large, is 33 kB); a larger file is refused before it is parsed, which takes minutes."""
MAX_YAML_NODES = 200_000
"""Values a document may hold once its aliases are expanded (bert.yaml: ~3,000). An alias
of an alias of ... (a "billion laughs" bomb) parses small and expands exponentially: it is
refused from its node graph, before anything expands it."""


STDIN = Path("-")
"""The path that names standard input (``run_experiment.py - < config.yaml``)."""


def load_yaml(path: Path) -> Any:
    """Parse a YAML file; a missing, unreadable, binary, oversized or alias-bombed file or a
    syntax error becomes a ConfigError naming it. Text parsed before is not parsed again
    (the cache is keyed by the text itself, so an edited file is parsed anew): planning a
    config reads each point's trace and layer profile several times, and parsing them was
    most of a dry run. Each caller gets its own copy of the data."""
    return copy.deepcopy(_parse_once(read_yaml_text(path), str(path)))


@functools.lru_cache(maxsize=64)
def _parse_once(text: str, source: str) -> Any:
    """parse_yaml, remembered; an error is not remembered (it is raised again each time)."""
    return parse_yaml(text, source)


def read_yaml_text(path: Path, kind: str = "YAML") -> str:
    """A YAML file's text, read once: a file, a pipe (``<(generate-config)``, whose second
    read would find it empty) or ``-`` for standard input; a missing, unreadable, binary or
    oversized one becomes a ConfigError naming it. A UTF-8 byte order mark (what "CSV UTF-8"
    and some Windows editors write first) is dropped. ``kind`` names the format in the
    messages (a dnn_benchmark CSV trace is read here too, under the same bound)."""
    try:
        if path == STDIN:
            text = sys.stdin.read(MAX_YAML_BYTES + 1)
        else:
            size = path.stat().st_size
            if size > MAX_YAML_BYTES:
                raise ConfigError(f"{path}: {size:,} bytes; a {kind} file here may have at most {MAX_YAML_BYTES:,}")
            text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: is a directory, not a {kind} file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a text ({kind}) file: byte {exc.start} is not UTF-8") from None
    return text.removeprefix("\ufeff")


MAX_YAML_DEPTH = 100
"""Levels a document may nest (the shipped configs, topologies and traces need at most 6).
PyYAML composes a document by recursion, and the schema check and the merges recurse on
the data: without a bound, a few thousand ``[`` end in a RecursionError."""


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a document nested deeper than MAX_YAML_DEPTH while it
    is composed (before its recursion reaches Python's limit)."""

    def __init__(self, stream: str) -> None:
        self._depth = 0
        super().__init__(stream)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def parse_yaml(text: str, source: str) -> Any:
    """Parse YAML text (a file's, or a --set value); ConfigError naming ``source`` for a
    syntax error, a character YAML does not allow (a control character), a key given twice
    in one mapping (both lines named: PyYAML would keep the last one silently), a document
    nested deeper than MAX_YAML_DEPTH or whose aliases expand past MAX_YAML_NODES."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"{source}: {len(text):,} characters; YAML here may have at most {MAX_YAML_BYTES:,}")
    loader = None
    try:
        loader = _Loader(text)  # inside the try: the reader checks the first characters as it is built
        node = loader.get_single_node()
        if node is None:
            return None
        expanded, depth = _measure(node)
        if expanded > MAX_YAML_NODES:
            raise ConfigError(f"{source}: its aliases expand to more than {MAX_YAML_NODES:,} values (an alias bomb?)")
        if depth > MAX_YAML_DEPTH:
            raise ConfigError(f"{source}: its aliases nest deeper than {MAX_YAML_DEPTH} levels")
        _refuse_duplicate_keys(loader, node, source)
        return loader.construct_document(node)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        raise ConfigError(f"{source}: not valid YAML: character U+{exc.character:04X} (line {line}) is not allowed in YAML "
                          "(a control character?)") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {_yaml_problem(exc)}") from None
    finally:
        if loader is not None:
            loader.dispose()


def _refuse_duplicate_keys(loader: yaml.SafeLoader, root: yaml.Node, source: str) -> None:
    """ConfigError naming the first key that a mapping of ``root`` gives twice, with both lines.
    Keys compare as the values they construct to (``1`` and ``0x1`` are one key); a merge
    (``<<: *defaults``) is no duplicate, since overriding merged keys is what it is for."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        stack.extend(_children(node))
        if not isinstance(node, yaml.MappingNode):
            continue
        marks: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = loader.construct_object(key_node)
            mark = key_node.start_mark
            if key in marks:
                first = marks[key]
                where = (f"lines {first.line + 1} and {mark.line + 1}" if first.line != mark.line
                         else f"line {mark.line + 1}, columns {first.column + 1} and {mark.column + 1}")
                raise ConfigError(f"{source}: key {key!r} appears twice in one mapping ({where}); YAML keeps only the last: remove one")
            marks[key] = mark


def _measure(root: yaml.Node) -> tuple[int, int]:
    """How many values ``root`` holds with every alias expanded, and how deep it nests, counted
    on the node graph (each shared node once, memoized), so that counting a bomb costs no more
    than its text; the size is capped at MAX_YAML_NODES + 1. A node that is an alias of itself
    (a recursive document) expands without end: it counts as over the limit."""
    over = MAX_YAML_NODES + 1
    sizes: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # depth first without recursion: a deeply nested document must not overflow the stack
        node, children_counted = stack.pop()
        key = id(node)
        if children_counted:
            on_path.discard(key)
            children = [sizes[id(child)] for child in _children(node)]
            sizes[key] = (min(1 + sum(size for size, _ in children), over), 1 + max((depth for _, depth in children), default=0))
        elif key not in sizes:
            if key in on_path:
                return over, 0
            on_path.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)]


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's error on one line: what is wrong and where (its own text spans several lines)."""
    mark = getattr(exc, "problem_mark", None)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc)
    return " ".join(problem.split()) + where


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``override`` laid over it, recursing into nested mappings."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def reject_keys(data: dict[str, Any], allowed: set[str], what: str, source: str, key_prefix: str = "") -> None:
    """ConfigError naming every key of ``data`` outside ``allowed`` (keys valid elsewhere but not for ``what``)."""
    extra = sorted(set(data) - allowed)
    if extra:
        raise ConfigError(f"{source}: " + "; ".join(f"{key_prefix}{k}: not allowed for {what}" for k in extra))
