"""Which testbed this is: its version, the folder its tree is in, and the git commit.

The version alone does not say which code ran: a checkout between two releases, or with
local changes, runs other code under the same number. So the commands' ``--version`` and
every run's provenance (experiments/provenance.py) name the commit too, and whether the
tree had uncommitted changes. A checkout is asked with git; an installed tree has no .git,
and carries the commit of the checkout it was built from (BUILD_INFO, written by setup.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from switchml_testbed import __version__

PACKAGE_DIR = Path(__file__).resolve().parent
BUILD_INFO = "build_info.json"
"""The file setup.py writes into a built package: the commit it was built from."""


def tree_root() -> Path:
    """The folder holding run_experiment.py and the packages: this package's own folder when
    installed from a wheel, the checkout (its parent) otherwise."""
    return PACKAGE_DIR if (PACKAGE_DIR / "run_experiment.py").is_file() else PACKAGE_DIR.parent


def is_checkout() -> bool:
    """Whether the tree is a source checkout (git's or an unpacked source archive) rather than
    an installed copy inside site-packages."""
    return tree_root() != PACKAGE_DIR


@dataclass(frozen=True)
class Commit:
    """A git commit and whether the tree differed from it in tracked files."""

    sha: str
    dirty: bool
    changes: str | None = None
    """A digest of those differences (``git diff HEAD``), so that two dirty trees of one
    commit tell apart; None for a clean tree."""

    def stamp(self) -> str:
        """build_info.json's text: what an installed copy's ``commit`` reads."""
        return json.dumps(asdict(self)) + "\n"

    def __str__(self) -> str:
        return f"git {self.sha[:12]}{', dirty' if self.dirty else ''}"


def _git(root: Path, *args: str) -> str | None:
    """git's output in ``root``; None if git fails. ``safe.directory``: root running in a
    user's clone (sudo) is the common case, which git otherwise refuses as dubious ownership."""
    try:
        done = subprocess.run(["git", "-c", f"safe.directory={root}", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):  # no git installed, or a hung file system
        return None
    return done.stdout if done.returncode == 0 else None


def commit() -> Commit | None:
    """The commit the tree is at (a checkout) or was built from (an installed copy); None for
    a tree from neither (a source archive, a wheel built outside git)."""
    root = tree_root()
    if is_checkout():
        if (root / ".git").exists():
            sha = _git(root, "rev-parse", "HEAD")
            status = _git(root, "status", "--porcelain", "--untracked-files=no")
            if sha and status is not None:
                changes = _git(root, "diff", "HEAD") if status.strip() else None
                return Commit(sha.strip(), bool(status.strip()), changes and hashlib.sha256(changes.encode()).hexdigest()[:12])
        return None
    stamp = PACKAGE_DIR / BUILD_INFO
    if not stamp.is_file():
        return None
    return Commit(**json.loads(stamp.read_text()))


def version_line(program: str) -> str:
    """The ``--version`` line: ``switchml-run 0.2.0 (git 1a2b3c4d5e6f, dirty)``."""
    where = commit()
    return f"{program} {__version__} ({where if where else 'no git commit known'})"


class _PrintVersion(argparse.Action):
    """``--version``: asks git only when given (every run builds the parser)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object, option: str | None = None) -> None:
        print(version_line(parser.prog))
        parser.exit()


def add_version_option(parser: argparse.ArgumentParser) -> None:
    """Give a command ``--version`` (``version_line``)."""
    parser.add_argument("--version", action=_PrintVersion, nargs=0, help="print the version and the git commit, then exit")


def program(module_form: str) -> str:
    """The name a command's usage and ``--version`` show: the installed command's own
    (``switchml-analysis``) when called as one, else ``module_form`` (``python -m analysis``)."""
    called = Path(sys.argv[0]).name
    return called if called.startswith("switchml-") else module_form
