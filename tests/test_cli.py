"""run_experiment.py's command line: validation and target choice fail fast, before any network."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from protocol.params import REPO_ROOT

MAIN_CONFIG = REPO_ROOT / "configs" / "8workers.yaml"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO_ROOT / "run_experiment.py"), *args],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL, env=env)


def test_dry_run_lists_every_sweep_point() -> None:
    done = run(str(MAIN_CONFIG), "--dry-run", "--switch", "embedded", "--set", "sweep={param: topology.workers, values: [2, 4]}")
    assert done.returncode == 0, done.stderr
    assert "switch target: embedded" in done.stdout
    assert "point 0 topology.workers=2: 2 workers (star)" in done.stdout
    assert "point 1 topology.workers=4: 4 workers (star)" in done.stdout


def test_a_config_from_a_pipe_or_standard_input_runs() -> None:
    """``run_experiment.py <(generate) --dry-run`` was refused ('/dev/fd/63: an experiment
    config must be a mapping'): the pipe was read a second time, for the target 'auto' chose,
    and was empty by then. ``-`` reads standard input."""
    text = MAIN_CONFIG.read_text()
    piped = subprocess.run(["bash", "-c", f'{sys.executable} {REPO_ROOT / "run_experiment.py"} <(cat {MAIN_CONFIG}) --dry-run'],
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert piped.returncode == 0, piped.stderr
    assert "experiment 8workers (/dev/fd/" in piped.stdout and "methods=switchml,ring,ps" in piped.stdout
    for config, name in ((text, "8workers"), ("\n".join(line for line in text.splitlines() if not line.startswith("name:")), "stdin")):
        done = subprocess.run([sys.executable, str(REPO_ROOT / "run_experiment.py"), "-", "--dry-run", "--switch", "embedded"],
                              input=config, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"experiment {name} (-), switch target: embedded"), done.stdout
    bad = subprocess.run([sys.executable, str(REPO_ROOT / "run_experiment.py"), "-", "--dry-run"], input="a: [",
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip().endswith("-: not valid YAML: expected the node content, but found '<stream end>' (line 1, column 5)"), bad.stderr


def test_bad_override_exits_2_naming_the_key() -> None:
    done = run(str(MAIN_CONFIG), "--dry-run", "--set", "protocol.pool_size=0")
    assert done.returncode == 2
    assert "protocol.pool_size: 0 is less than the minimum of 1" in done.stderr


def test_bmv2_where_it_is_missing_fails_at_once_saying_what_and_where_to_get_it() -> None:
    without_bmv2 = {**os.environ, "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}  # no simple_switch, no p4c
    done = run(str(MAIN_CONFIG), "--switch", "bmv2", "--dry-run", env=without_bmv2)
    assert done.returncode == 2
    assert "switch target 'bmv2' needs simple_switch" in done.stderr
    assert "vagrant up" in done.stderr


def test_ebpf_where_clang_is_missing_fails_at_once_saying_what(tmp_path: Path) -> None:
    """A PATH with the tools the eBPF switch needs but clang: --switch ebpf names what is missing."""
    for tool in ("ip", "tc", "bpftool"):
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"{tool} is not installed here")
        (tmp_path / tool).symlink_to(found)
    done = run(str(MAIN_CONFIG), "--switch", "ebpf", "--dry-run", env={**os.environ, "PATH": str(tmp_path)})
    assert done.returncode == 2
    assert "switch target 'ebpf' needs clang" in done.stderr
    assert "scripts/bootstrap.sh" in done.stderr


NOBODY = 65534


@pytest.fixture
def checkout_reachable_by_others() -> Iterator[None]:
    """Another user must be able to pass through the folders above the checkout (a CI clone may
    sit in a private mktemp folder): each that denies others the search bit gets it for the
    test (search only, not listing), and its mode back afterwards."""
    changed = {}
    for folder in REPO_ROOT.parents:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH:
            changed[folder] = mode
            folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
    try:
        yield
    finally:
        for folder, mode in changed.items():
            folder.chmod(stat.S_IMODE(mode))


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="drops from root to another user with setpriv")
@pytest.mark.skipif(not all(os.stat(p).st_mode & 0o005 == 0o005 for p in (REPO_ROOT, REPO_ROOT / "run_experiment.py")),
                    reason="the repository is not readable by other users")
@pytest.mark.parametrize("overrides", [[], ["--set", "topology.link.delay_ms=1"]], ids=["main", "delay"])
@pytest.mark.usefixtures("checkout_reachable_by_others")
def test_a_dry_run_as_non_root_shows_what_a_root_run_would_run(overrides: list[str]) -> None:
    """As non-root, 'auto' passed over the eBPF switch (only root can probe the kernel for it)
    and showed the embedded switch at its 5 Mbit/s, where a root run takes ebpf at 10; with
    a link delay it assumed the kernel had no netem (which only root can probe either)."""
    as_root = run(str(MAIN_CONFIG), "--dry-run", *overrides)
    as_nobody = subprocess.run(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                                sys.executable, str(REPO_ROOT / "run_experiment.py"), str(MAIN_CONFIG), "--dry-run", *overrides],
                               capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
                               env={**os.environ, "HOME": "/tmp"}, cwd="/")
    assert as_root.returncode == 0 and as_nobody.returncode == 0, as_root.stderr + as_nobody.stderr
    assert as_root.stdout in as_nobody.stdout, as_nobody.stdout  # what a root run runs: its target and its link rate
    if as_nobody.stdout != as_root.stdout:
        assert "only root can find out which, so this dry run shows each:" in as_nobody.stdout


def test_a_stop_signal_whose_exit_was_swallowed_still_stops_the_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A SIGINT whose SystemExit Python ignored (raised inside an import lock's callback) let a
    CI run start and verify; the start-up's checkpoints exit 130 before anything is written."""
    import run_experiment

    monkeypatch.setattr(run_experiment, "STOPPED_BEFORE_START", [signal.SIGINT])
    with pytest.raises(SystemExit) as stopped:
        run_experiment.run_command([str(MAIN_CONFIG), "--dry-run", "--out", str(tmp_path / "run")])
    assert stopped.value.code == run_experiment.EXIT_INTERRUPTED and not (tmp_path / "run").exists()
    monkeypatch.setattr(run_experiment, "STOPPED_BEFORE_START", [])
    assert run_experiment.run_command([str(MAIN_CONFIG), "--dry-run", "--switch", "embedded"]) == run_experiment.EXIT_OK
