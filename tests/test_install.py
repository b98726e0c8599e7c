"""The ways a Python user installs the testbed, each in a fresh venv from a clean clone.

``pip install .`` (non-editable), a built wheel and ``pip install -e .`` must each give
commands that work from any folder (``--version``, the main config's dry run, the other
two commands), and put nothing into site-packages but switchml_testbed (docs/install.md).
The clone holds the working tree's files (tracked and new, as git sees them), committed,
so what is tested is what a user's ``git clone`` would get with these changes.

No network: each venv borrows the dependencies (and pip, setuptools) of the Python running
the tests through a .pth file of plain paths, which adds their folders but runs none of
their .pth files (so the checkout's own editable install stays out of it), and builds with
--no-build-isolation --no-deps.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.params import REPO_ROOT
from switchml_testbed import __version__
from tests.conftest import closed_to_others

pytestmark = pytest.mark.slow

INSTALL_TIMEOUT_S = 600
PIP = ["-m", "pip", "--disable-pip-version-check", "--no-input", "--no-cache-dir"]
OFFLINE = ["--no-build-isolation", "--no-deps", "--no-index"]
BORROWED = "zz_borrowed_dependencies.pth"
"""The .pth file through which a test's venv borrows this Python's packages."""
GENERIC = ("base", "network", "protocol", "analysis", "hosts", "labs", "experiments", "switches", "run_experiment")


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S,
                          stdin=subprocess.DEVNULL, check=False)


def checked(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = run(argv, cwd, env)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A clean clone of the working tree (as one commit), and that commit."""
    listed = checked(["git", "-C", str(REPO_ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO_ROOT)
    root = tmp_path_factory.mktemp("clone") / "switchml-testbed"
    root.mkdir()
    for name in filter(None, listed.split("\0")):
        source, target = REPO_ROOT / name, root / name
        if source.is_file():  # a file deleted but not yet committed is listed and absent
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(source.read_bytes())
            target.chmod(source.stat().st_mode)
    git = ["git", "-C", str(root), "-c", "user.name=test", "-c", "user.email=test@localhost"]
    checked([*git, "init", "-q"], root)
    checked([*git, "add", "-A"], root)
    checked([*git, "commit", "-q", "-m", "the working tree"], root)
    return root, checked([*git, "rev-parse", "HEAD"], root).strip()


def fresh_venv(where: Path) -> Path:
    """A venv without pip of its own that sees this Python's packages (see the module's docstring)."""
    checked([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(where)], where.parent)
    python = where / "bin" / "python"
    borrowed = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (purelib(python) / BORROWED).write_text("".join(f"{p}\n" for p in borrowed))
    return python


def purelib(python: Path) -> Path:
    """The venv's site-packages."""
    return Path(checked([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], python.parent).strip())


def installed_top_level(python: Path) -> set[str]:
    """What the install put into the venv's site-packages, besides our .pth file."""
    return {entry.name for entry in purelib(python).iterdir()} - {BORROWED, "__pycache__"}


def check_commands(venv: Path, commit: str, elsewhere: Path) -> None:
    """The three commands from a folder that is not the tree: --version with the commit,
    the main config's dry run (the README's first command), the labs' list (also as
    ``python -m switchml_testbed labs``)."""
    env = {**os.environ, "XDG_CACHE_HOME": str(elsewhere / "cache")}
    env.pop("PYTHONPATH", None)
    for command in ("switchml-run", "switchml-analysis", "switchml-labs"):
        version = checked([str(venv / "bin" / command), "--version"], elsewhere, env)
        assert version.strip() == f"{command} {__version__} (git {commit[:12]})"
    plan = checked([str(venv / "bin" / "switchml-run"), "configs/8workers.yaml", "--dry-run"], elsewhere, env)
    assert plan.startswith("experiment 8workers (") and "point 0:" in plan
    simulated = checked([str(venv / "bin" / "switchml-run"), "configs/8workers.yaml", "--dry-run", "--simulate"], elsewhere, env)
    assert "simulated:" in simulated
    assert "labs/00-run-and-measure/" in checked([str(venv / "bin" / "switchml-labs"), "list"], elsewhere, env)
    assert "labs/00-run-and-measure/" in checked([str(venv / "bin" / "python"), "-m", "switchml_testbed", "labs", "list"], elsewhere, env)
    for generic in GENERIC:  # importable only inside the commands' own processes
        imported = run([str(venv / "bin" / "python"), "-c", f"import {generic}"], elsewhere, env)
        assert f"No module named '{generic}'" in imported.stderr, f"import {generic} found something: {imported.stderr}"


@pytest.mark.parametrize("how", ["pip install .", "wheel", "pip install -e ."])
def test_install_gives_commands_that_work_from_any_folder(how: str, clone: tuple[Path, str], tmp_path: Path) -> None:
    root, commit = clone
    python = fresh_venv(tmp_path / "venv")
    if how == "wheel":
        wheels = tmp_path / "wheels"
        checked([str(python), *PIP, "wheel", *OFFLINE, "--wheel-dir", str(wheels), str(root)], tmp_path)
        [wheel] = wheels.glob("switchml_testbed-*.whl")
        target = [str(wheel)]
    else:
        target = ["-e", str(root)] if how.endswith("-e .") else [str(root)]
    checked([str(python), *PIP, "install", *OFFLINE, *target], tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    check_commands(tmp_path / "venv", commit, elsewhere)
    ours = {name for name in installed_top_level(python) if "switchml_testbed" in name}
    assert installed_top_level(python) == ours, f"not ours: {installed_top_level(python) - ours}"
    editable = how.endswith("-e .")  # its package stays in the clone, found by setuptools' finder
    assert ("switchml_testbed" in ours) != editable and f"switchml_testbed-{__version__}.dist-info" in ours


NOBODY = 65534
"""The user a root test runs bootstrap.sh --user as (a test run by another user runs it as itself)."""


def as_user(argv: list[str]) -> list[str]:
    """``argv`` run without root: as nobody when the tests run as root."""
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv] if os.geteuid() == 0 else argv


def lend_borrowed_dependencies(python: Path, into: Path) -> None:
    """Point ``python``'s borrowed dependencies that other users cannot reach (a checkout in
    mktemp -d's mode 0700 folder) at hard-linked copies in ``into``, a folder user nobody
    can search: linking costs seconds and no space, and the files keep their owner and modes."""
    pth = purelib(python) / BORROWED
    borrowed = pth.read_text().splitlines()
    lent = []
    for number, folder in enumerate(map(Path, borrowed)):
        if closed_to_others(folder) is None:
            lent.append(str(folder))
            continue
        copy = into / str(number)
        try:
            shutil.copytree(folder, copy, symlinks=True, copy_function=os.link)
        except shutil.Error as failed:  # another file system: a copy would cost gigabytes
            pytest.skip(f"user nobody cannot reach {closed_to_others(folder)} and {folder} cannot be hard-linked to {into}: {failed.args[0][0][2]}")
        lent.append(str(copy))
    pth.write_text("".join(f"{folder}\n" for folder in lent))


@pytest.fixture
def user_clone(clone: tuple[Path, str]) -> Iterator[Path]:
    """A copy of the clone that a user without root owns, in a folder that user can reach
    (pytest's own temporary folders are its user's alone), with a .venv that borrows this
    Python's packages (bootstrap.sh keeps a .venv it finds)."""
    where = Path(tempfile.mkdtemp(prefix="switchml-user-install-"))
    try:
        where.chmod(0o755)
        root = where / "switchml-testbed"
        shutil.copytree(clone[0], root, symlinks=True)
        python = fresh_venv(root / ".venv")
        assert python.exists()
        (where / "home").mkdir()
        if os.geteuid() == 0:
            for path in [where, *where.rglob("*")]:
                os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
            lend_borrowed_dependencies(python, where / "borrowed")  # after the chown: links share their files' owner
        yield root
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_bootstrap_user_installs_the_simulated_clock_and_the_analysis_without_root(user_clone: Path, clone: tuple[Path, str]) -> None:
    """docs/install.md's non-root install: bootstrap.sh --user, then a simulated run and its
    figure; without --user, bootstrap.sh says that it needs root and names --user."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PIP_", "PYTHON"))}
    env |= {"HOME": str(user_clone.parent / "home"), "PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"}  # offline
    if os.geteuid() == 0:
        refused = run(as_user(["./scripts/bootstrap.sh"]), user_clone, env)
        assert refused.returncode == 1 and "without root, bootstrap.sh --user" in refused.stderr
        # root in another user's clone (sudo): git's dubious-ownership refusal must not lose the commit
        assert f"(git {clone[1][:12]})" in checked([sys.executable, "run_experiment.py", "--version"], user_clone)
    installed = run(as_user(["./scripts/bootstrap.sh", "--user"]), user_clone, env)
    assert installed.returncode == 0 and ".venv is ready for the simulated clock" in installed.stderr, installed.stderr
    python = str(user_clone / ".venv" / "bin" / "python")
    checked(as_user([python, "run_experiment.py", "configs/tat_vs_size.yaml", "--simulate", "--set", "repetitions=1",
                     "--out", "results/sim"]), user_clone, env)
    checked(as_user([python, "-m", "analysis", "results/sim", "--out", "figures"]), user_clone, env)
    assert (user_clone / "figures" / "tat_vs_size.png").stat().st_size > 0
