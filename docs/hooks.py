"""MkDocs hooks: the documentation site is built from the pages as they read on a code host.

Every page links the way it reads in the repository: README.md to ``docs/x.md``, a page in
docs/ to ``../labs/README.md`` or to a source file. The site adds what lives outside docs/:

- README.md becomes the site's home page;
- the module READMEs (``PUBLISHED``) become pages under ``repo/``, so links to them work;
- docs/configuration.md is rendered from the schemas at build time
  (experiments/config_reference.py), so the site cannot show a stale one.

Each relative link is rewritten to where its target sits in the site. A link to a
repository file the site does not publish (a source file, a folder) keeps its text, set as
code, since the site has no copy of it. A link to nothing stays as it is, so that
``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import posixpath
import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # mkdocs loads this file by path; the generator imports the project
    sys.path.insert(0, str(REPO_ROOT))

HOME = "README.md"
UNPUBLISHED = {"docs", "tests", "build", "results", "node_modules", "instructor"}
"""Folders whose READMEs the site leaves out: docs/ is the site itself, tests/ and build output
are not documentation, and labs/instructor/'s answer keys stay out of a public site. Hidden
folders (.venv, .pytest_cache) too."""
PUBLISHED = tuple(sorted(
    path.relative_to(REPO_ROOT).as_posix() for path in REPO_ROOT.glob("*/**/README.md")
    if not any(part in UNPUBLISHED or part.startswith(".") for part in path.relative_to(REPO_ROOT).parts)
))
"""The module READMEs, published under repo/ (labs/README.md, benchmarks/README.md, ...)."""
SITE_PREFIX = "repo/"
LINK = re.compile(r"(!?\[[^\]]*\])\(([^)\s]+)\)")


def site_path(repo_path: str) -> str | None:
    """Where a repository file sits in the site (a docs_dir-relative path), None if nowhere."""
    if repo_path == HOME:
        return "index.md"
    if repo_path.startswith("docs/"):
        return repo_path.removeprefix("docs/")
    if repo_path in PUBLISHED:
        return SITE_PREFIX + repo_path
    return None


def on_files(files: Files, config: Any) -> Files:
    """Add the home page, the module READMEs and the generated configuration reference."""
    from experiments.config_reference import PAGE, render

    for repo_path in (HOME, *PUBLISHED):
        files.append(File.generated(config, site_path(repo_path), abs_src_path=str(REPO_ROOT / repo_path),
                                    inclusion=InclusionLevel.INCLUDED))
    generated = PAGE.relative_to(REPO_ROOT / "docs").as_posix()
    files.remove(files.get_file_from_path(generated))
    files.append(File.generated(config, generated, content=render()))
    return files


def repo_path_of(src_uri: str) -> str:
    """The repository path of a site page's source."""
    if src_uri == "index.md":
        return HOME
    if src_uri.startswith(SITE_PREFIX) and src_uri.removeprefix(SITE_PREFIX) in PUBLISHED:
        return src_uri.removeprefix(SITE_PREFIX)
    return "docs/" + src_uri


def rewrite(markdown: str, src_uri: str) -> str:
    """``markdown``'s relative links, written for the repository, made to work in the site."""
    source = repo_path_of(src_uri)

    def one(match: re.Match[str]) -> str:
        label, target = match.groups()
        if re.match(r"^[a-z][a-z0-9+.-]*:|^#|^/", target):
            return match.group(0)  # a URL, an anchor on this page, an absolute path
        path, hash_, anchor = target.partition("#")
        repo_target = posixpath.normpath(posixpath.join(posixpath.dirname(source), path))
        in_site = site_path(repo_target)
        if in_site is None and (REPO_ROOT / repo_target).is_dir() and site_path(f"{repo_target}/README.md"):
            in_site = site_path(f"{repo_target}/README.md")
        if in_site is not None:
            relative = posixpath.relpath(in_site, posixpath.dirname(src_uri) or ".")
            return f"{label}({relative}{hash_}{anchor})"
        if (REPO_ROOT / repo_target).exists() and not label.startswith("!"):
            text = label[1:-1]
            return text if text.strip("`") == repo_target or "`" in text else f"{text} (`{repo_target}`)"
        return match.group(0)

    return LINK.sub(one, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    return rewrite(markdown, page.file.src_uri)
