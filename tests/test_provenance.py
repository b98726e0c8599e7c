"""Provenance: summary.json says which code, machine, tools, link rate and command made a
run (experiments/provenance.py), and ``python -m analysis`` prints it for the runs it
draws and will not mix commits or clocks in one set of figures unless told to
(analysis/provenance.py). The commands' ``--version`` names the same commit."""

from __future__ import annotations

import json
import logging
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from analysis.__main__ import main as analysis_main
from experiments.config import CONFIG_DIR, TARGET_RATE_SOURCE, load_experiment
from base.tool_version import first_line
from experiments.provenance import tool_versions
from experiments.simulated import simulated_target
from hosts.switchml.native import compiler
from protocol import results_format as fmt
from protocol.params import REPO_ROOT
from switches.targets import AUTO, REGISTRY
from switchml_testbed import __version__
from switchml_testbed.release import commit

FIXTURE = REPO_ROOT / "tests" / "data" / "results_small"


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_the_commit_is_the_checkouts() -> None:
    at = commit()
    assert at is not None and at.sha == git("rev-parse", "HEAD")
    assert at.dirty == bool(git("status", "--porcelain", "--untracked-files=no"))
    assert (at.changes is None) == (not at.dirty)


@pytest.mark.parametrize("command", [["run_experiment.py"], ["-m", "analysis"], ["-m", "labs"]])
def test_every_command_prints_its_version_and_commit(command: list[str]) -> None:
    argv = [sys.executable, str(REPO_ROOT / command[0])] if command[0].endswith(".py") else [sys.executable, *command]
    done = subprocess.run([*argv, "--version"], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120, check=False)
    at = commit()
    assert at is not None
    assert done.returncode == 0 and done.stdout.strip().endswith(f" {__version__} ({at})"), done.stdout + done.stderr


def test_a_simulated_runs_summary_records_its_provenance(tmp_path: Path) -> None:
    config = CONFIG_DIR / "8workers.yaml"
    argv = [str(REPO_ROOT / "run_experiment.py"), str(config), "--simulate", "--set", "methods=[switchml]",
            "--set", "workload.elements=4096", "--set", "repetitions=1", "--out", str(tmp_path / "run")]
    done = subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                          cwd=tmp_path, check=False)
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "run" / fmt.SUMMARY_FILE).read_text())
    at = commit()
    assert at is not None
    target = simulated_target(AUTO)  # the target an emulated run of the config takes here, and its rate
    rate = REGISTRY[target].link_mbps(256)
    cc = compiler()  # the native simulator (star.c, with worker.c) where it builds; no Mininet
    tools = {f"native worker compiler ({cc})": first_line([cc, "--version"])} if summary["data_path"]["used"] == "native" else {}
    assert summary[fmt.PROVENANCE_KEY] == {
        "version": __version__, "commit": at.sha, "dirty": at.dirty, "changes": at.changes, "command": ["run_experiment.py", *argv[1:]],
        "cwd": str(tmp_path), "kernel": platform.release(), "python": platform.python_version(), "clock": "simulated",
        "switch_target": target, "tools": tools,
        "link_rate": {"mbps": rate, "source": f"{TARGET_RATE_SOURCE} {target} at k = 256"},
    }
    assert (summary["link_mbps"], summary["link_mbps_source"]) == (rate, summary[fmt.PROVENANCE_KEY]["link_rate"]["source"])


@pytest.mark.parametrize(("target", "its_tools"), [("bmv2", {"simple_switch", "p4c"}), ("ebpf", {"clang"}), ("embedded", set())])
def test_an_emulated_run_records_mininet_and_its_targets_tools(target: str, its_tools: set[str]) -> None:
    experiment = load_experiment(CONFIG_DIR / "8workers.yaml", [f"switch.target={target}", "protocol.data_path=python"])
    tools = tool_versions(experiment, target, simulated=False)
    assert set(tools) == {"mininet", *its_tools}  # the Python data path: no worker compiler
    for tool in its_tools:
        assert tools[tool] == first_line([tool, "--version"])  # None where the tool is absent
    assert tool_versions(experiment, target, simulated=True) == {}


@pytest.mark.skipif(shutil.which("clang") is None, reason="clang is not installed")
def test_the_native_data_paths_compiler_is_recorded() -> None:
    experiment = load_experiment(CONFIG_DIR / "8workers.yaml", ["switch.target=embedded", "protocol.data_path=native"])
    tools = tool_versions(experiment, "embedded", simulated=False)
    [(name, version)] = [(name, version) for name, version in tools.items() if name.startswith("native worker compiler")]
    assert version is not None and version == first_line([name.split("(")[1].rstrip(")"), "--version"])


def test_a_ddp_config_records_torch() -> None:
    experiment = load_experiment(CONFIG_DIR / "ddp_script.yaml") if _torch() else None
    if experiment is None:
        pytest.skip("PyTorch is not installed (a DDP config does not load without it)")
    assert "torch" in tool_versions(experiment, "embedded", simulated=True)


def _torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


# -- the analysis -----------------------------------------------------------------------------


def fixture_copy(tmp_path: Path) -> list[Path]:
    """The analysis fixture's runs, copied (their summary.json to be edited)."""
    shutil.copytree(FIXTURE, tmp_path / "results", ignore=shutil.ignore_patterns("README.md"))
    return sorted(path.parent for path in (tmp_path / "results").rglob(fmt.SUMMARY_FILE))


def edit_summary(run: Path, **fields: object) -> None:
    summary = json.loads((run / fmt.SUMMARY_FILE).read_text())
    (run / fmt.SUMMARY_FILE).write_text(json.dumps(summary | fields))


def stamp(run: Path, sha: str, dirty: bool = False, changes: str | None = None) -> None:
    edit_summary(run, provenance={"version": __version__, "commit": sha, "dirty": dirty, "changes": changes,
                                  "command": ["run_experiment.py", "x.yaml"],
                                  "kernel": "6.1.0", "switch_target": "ebpf", "tools": {"mininet": "2.3.0"},
                                  "link_rate": {"mbps": 10.0, "source": "switch.link_bw_mbps"}})


def test_the_analysis_needs_an_output_folder(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        analysis_main([str(FIXTURE)])
    assert exited.value.code == 2 and "--out" in capsys.readouterr().err


def test_the_analysis_prints_each_drawn_runs_provenance(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    runs = fixture_copy(tmp_path)
    for run in runs:
        stamp(run, "a" * 40)
    with caplog.at_level(logging.INFO):
        assert analysis_main([str(tmp_path / "results"), "--out", str(tmp_path / "figures")]) == 0
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("provenance of ")]
    assert lines and all(f"commit {'a' * 12}; version {__version__}; emulated; target ebpf" in line for line in lines)
    assert all("10.0 Mbit/s from switch.link_bw_mbps; kernel 6.1.0; mininet 2.3.0; command: run_experiment.py x.yaml" in line
               for line in lines)


@pytest.mark.parametrize(("first", "second"), [
    ({"sha": "a" * 40}, {"sha": "b" * 40}),
    ({"sha": "a" * 40}, {"sha": "a" * 40, "dirty": True, "changes": "c" * 12}),
    ({"sha": "a" * 40, "dirty": True, "changes": "c" * 12}, {"sha": "a" * 40, "dirty": True, "changes": "d" * 12}),
], ids=["other commit", "dirty tree", "other changes"])
def test_the_analysis_refuses_runs_of_different_code(first: dict, second: dict, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    runs = fixture_copy(tmp_path)
    stamp(runs[0], **first)
    for run in runs[1:]:
        stamp(run, **second)
    assert analysis_main([str(tmp_path / "results"), "--out", str(tmp_path / "figures")]) == 2
    assert "2 different code versions" in caplog.text and "--mixed-commits" in caplog.text
    assert not (tmp_path / "figures").exists(), "nothing is drawn"
    assert analysis_main([str(tmp_path / "results"), "--out", str(tmp_path / "figures"), "--mixed-commits"]) == 0


def test_the_analysis_refuses_to_mix_clocks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    runs = fixture_copy(tmp_path)
    simulated = next(run for run in runs if run.name == "tat_vs_size")
    edit_summary(simulated, simulated=True)
    out = tmp_path / "figures"
    mixed = "--mixed-commits"  # the fixture's runs were written by different versions (tests/test_analysis.py)
    assert analysis_main([str(tmp_path / "results"), "--out", str(out), mixed]) == 2
    assert "mix emulated and simulated runs (simulated: tat_vs_size)" in caplog.text and not out.exists()
    assert analysis_main([str(tmp_path / "results"), "--out", str(out), mixed, "--clock", "emulated"]) == 0
    assert not (out / "tat_vs_size.png").exists() and (out / "ate_vs_workers.png").exists()
    assert analysis_main([str(tmp_path / "results"), "--out", str(out), mixed, "--mixed-clocks"]) == 0
    assert (out / "tat_vs_size.png").exists()
