"""The documentation: the README stays a short page, the site builds in strict mode, every
relative link resolves, and the configuration reference is the schema's.

The links are checked as a code host shows the files (README.md, docs/): the target file
exists and, where the link names a heading, the heading does, by GitHub's anchor rule. The
site's build (mkdocs, the `docs` extra) checks them again as the site shows them.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from experiments import config_reference
from experiments.config import experiment_schema
from base.yamlschema import load_schema, load_yaml
from protocol.params import REPO_ROOT
from topologies.model import SCHEMA_PATH as TOPOLOGY_SCHEMA_PATH

pytestmark = pytest.mark.parallel_safe  # no network, switch, sandbox or fixed port: runs beside the others (-n)

README = REPO_ROOT / "README.md"
DOCS = REPO_ROOT / "docs"
MAIN_JOB = "./scripts/bootstrap.sh && .venv/bin/python run_experiment.py configs/8workers.yaml   # the main job"
TEST_COMMAND = "./scripts/bootstrap.sh && .venv/bin/python -m pytest -n 2                               # the tests"
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def documentation_pages() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def links(page: Path) -> Iterator[str]:
    """The link targets of a Markdown page, outside code blocks and code spans."""
    text = INLINE_CODE.sub("", FENCE.sub("", page.read_text()))
    for match in LINK.finditer(text):
        yield match.group(1)


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, each space a hyphen."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on a page (a repeated one gets -1, -2, ... as on GitHub)."""
    found: set[str] = set()
    for line in FENCE.sub("", page.read_text()).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*$", line)
        if match:
            anchor, n = github_anchor(match.group(1)), 1
            while anchor in found:
                anchor, n = f"{github_anchor(match.group(1))}-{n}", n + 1
            found.add(anchor)
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # a URL: not ours to check offline
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{target}: no such file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading with that anchor in {resolved.name}")
    return broken


def test_readme_is_a_short_page_with_the_two_commands() -> None:
    """A newcomer reads it in minutes; .ci/run and the users rely on its two command lines."""
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move detail into docs/"
    assert MAIN_JOB in lines and TEST_COMMAND in lines


@pytest.mark.parametrize("page", documentation_pages(), ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_sees_a_broken_link_and_a_missing_anchor(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other page\n\n## A heading: with `code`\n")
    page.write_text("[ok](other.md#a-heading-with-code) [gone](missing.md) [bad](other.md#nope)\n"
                    "`[in code](missing.md)`\n```\n[in a block](missing.md)\n```\n")
    assert broken_links(page) == ["missing.md: no such file", "other.md#nope: no heading with that anchor in other.md"]


def test_the_site_builds_in_strict_mode(tmp_path: Path) -> None:
    """mkdocs --strict fails on a broken link or anchor in the site, a page missing from the
    nav's files, or a hook that fails (the configuration reference is rendered by one)."""
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs-material is not installed: .venv/bin/python -m pip install -e '.[docs]' (bootstrap.sh installs it)")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO_ROOT / "mkdocs.yml"),
                           "--site-dir", str(tmp_path / "site")], capture_output=True, text=True, cwd=REPO_ROOT,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-4000:]
    assert (tmp_path / "site" / "configuration" / "index.html").is_file()


def test_the_configuration_reference_is_current() -> None:
    assert config_reference.PAGE.read_text() == config_reference.render(), (
        "docs/configuration.md is stale: run .venv/bin/python -m experiments.config_reference")


def schema_keys(schema: Any) -> Iterator[str]:
    """Every property name anywhere in a schema (under properties, items, $defs, allOf, ...),
    found without the generator's walk."""
    if isinstance(schema, dict):
        for name, sub in schema.get("properties", {}).items():
            yield name
            yield from schema_keys(sub)
        for key, sub in schema.items():
            if key != "properties":
                yield from schema_keys(sub)
    elif isinstance(schema, list):
        for sub in schema:
            yield from schema_keys(sub)


def config_keys(data: Any, prefix: str = "") -> Iterator[str]:
    """The dotted keys a config uses (a list of mappings as ``key[].``)."""
    if isinstance(data, dict):
        for name, value in data.items():
            yield f"{prefix}{name}"
            yield from config_keys(value, f"{prefix}{name}.")
    elif isinstance(data, list):
        for item in data:
            yield from config_keys(item, f"{prefix[:-1]}[].")


def reference_rows() -> dict[str, str]:
    """The reference page's rows: key -> its meaning."""
    rows = {}
    for line in config_reference.PAGE.read_text().splitlines():
        match = re.match(r"^\| `([^`]+)` \|.*\| ([^|]*) \|$", line)
        if match:
            rows[match.group(1)] = match.group(2).strip()
    return rows


def test_the_configuration_reference_documents_every_key() -> None:
    """Each property of either schema, and each key any shipped config uses, has a row with a meaning."""
    rows = reference_rows()
    names = {path.rsplit(".", 1)[-1].removesuffix("[]") for path in rows}
    schemas = [experiment_schema(), load_schema(TOPOLOGY_SCHEMA_PATH)]
    missing = {name for schema in schemas for name in schema_keys(schema)} - names - {"$schema"}
    assert not missing, f"keys the reference misses: {sorted(missing)}"
    used = set()
    for config in sorted((REPO_ROOT / "configs").rglob("*.yaml")):
        if config.name.endswith(".schema.yaml"):
            continue
        used |= {key for key in config_keys(load_yaml(config)) if not key.startswith(("sweep.values", "cluster.placement."))}
    undocumented = sorted(used - set(rows))
    assert not undocumented, f"keys used in configs/ that the reference lacks: {undocumented}"
    assert not [key for key, meaning in rows.items() if not meaning.removeprefix("(required)").strip()], "keys without a meaning"
