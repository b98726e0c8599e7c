"""How a wheel carries the testbed's tree (docs/install.md, "How the package is laid out").

pyproject.toml declares the one package, switchml_testbed; this file extends setuptools'
build_py at its documented hook (cmdclass) to copy the tree (the code, its schemas,
topologies, traces, C and P4 sources, configs, labs, run_experiment.py) into that package,
and to stamp the commit the wheel is built from. An editable install copies nothing: its
commands find the tree in the checkout.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

SOURCE = Path(__file__).resolve().parent
sys.path.insert(0, str(SOURCE))  # this checkout's switchml_testbed, to read its commit as the commands do
from switchml_testbed.release import BUILD_INFO as STAMP_NAME, commit  # noqa: E402

TREE = ("analysis", "base", "configs", "examples", "experiments", "hosts", "labs", "methods", "network", "p4", "protocol",
        "simulation", "switches", "topologies", "workloads", "run_experiment.py")
"""The checkout's folders (and the one script) that the commands run or read; MANIFEST.in
lists the same for a source archive."""
LEFT_OUT = ("__pycache__", "*.pyc", ".pytest_cache", ".hypothesis")
BUILD_INFO = Path("switchml_testbed") / STAMP_NAME


def commit_stamp() -> str | None:
    """build_info.json's text: the checkout's commit (release.commit), or the source
    archive's own stamp when built from one; None outside git."""
    if (SOURCE / BUILD_INFO).is_file():
        return (SOURCE / BUILD_INFO).read_text()
    at = commit()
    return None if at is None else at.stamp()


class BuildTree(build_py):
    """build_py, plus the tree and the commit stamp inside the package."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        package = Path(self.build_lib) / "switchml_testbed"
        for name in TREE:
            source = SOURCE / name
            if source.is_dir():
                shutil.copytree(source, package / name, ignore=shutil.ignore_patterns(*LEFT_OUT), dirs_exist_ok=True)
            else:
                shutil.copy2(source, package / name)
        stamp = commit_stamp()
        if stamp is not None:
            (package / BUILD_INFO.name).write_text(stamp)


class SourceWithStamp(sdist):
    """sdist, plus the commit stamp: a wheel built from the archive still names its commit."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        stamp = commit_stamp()
        if stamp is not None:
            (Path(base_dir) / BUILD_INFO).write_text(stamp)


setup(cmdclass={"build_py": BuildTree, "sdist": SourceWithStamp})
