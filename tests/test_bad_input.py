"""Bad input and fault drills of issues 40 and 44: each mistake gets exit status 2 and one
line naming it, and a run that fails names its culprit."""

from __future__ import annotations

import json
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import network.cleanup as cleanup
from base.cgroup import capped_group, memory_limit
from base.yamlschema import MAX_YAML_BYTES, MAX_YAML_DEPTH, ConfigError, parse_yaml
from experiments.config import EMULATED_MEMORY, SIMULATED_MEMORY, load_experiment, resolve_workload_files
from experiments.limits import Limit
from experiments.workers import WorkerFailure, WorkerGroup
from labs.catalog import load_lab
from protocol.params import REPO_ROOT
from protocol.results_format import resume_command
from protocol.worker_spec import WorkerSpec
from topologies.model import load_topology
from workloads.trace import TraceError, load_trace

MAIN_CONFIG = REPO_ROOT / "configs" / "8workers.yaml"
LONG_NAME = "a" * 300
"""A folder name longer than any Linux file system takes (NAME_MAX, 255 bytes)."""


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO_ROOT / "run_experiment.py"), *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def errors(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The lines the command logged as errors, and any traceback's."""
    return [line for line in done.stderr.splitlines() if " ERROR " in line or line.startswith(("Traceback", "  File"))]


def refused(done: subprocess.CompletedProcess[str], message: str) -> None:
    """Exit status 2 and one error line that holds ``message``."""
    assert done.returncode == 2, done.stderr
    [line] = errors(done)
    assert message in line, line


# --- YAML a user wrote: configs, --set values, topologies, traces, lab.yaml --------------------------------------


@pytest.mark.parametrize("where", ["config", "--set", "trace"])
def test_a_control_character_is_refused_in_one_line(tmp_path: Path, where: str) -> None:
    """It gave a yaml.reader.ReaderError traceback and exit 1: parse_yaml built the loader,
    whose reader checks the first characters, outside its try."""
    config, extra = tmp_path / "config.yaml", []
    text = MAIN_CONFIG.read_text()
    if where == "config":
        config.write_text("description: \x1b[31mred\n" + text)
    elif where == "--set":
        config.write_text(text)
        extra = ["--set", "description=\x01"]
    else:
        trace = tmp_path / "trace.yaml"
        trace.write_text("model: \x07\n")
        config.write_text(text.replace("kind: synthetic", f"kind: trace\n  model: {trace}").replace("  elements:", "  # elements:"))
    done = run(str(config), "--dry-run", *extra)
    refused(done, "is not allowed in YAML (a control character?)")


def test_deep_nesting_is_refused_in_one_line(tmp_path: Path) -> None:
    """3,000 levels gave a RecursionError (3,000 lines of traceback): PyYAML composes by recursion."""
    config = tmp_path / "deep.yaml"
    config.write_text(MAIN_CONFIG.read_text() + "description: " + "[" * 3000 + "]" * 3000 + "\n")
    refused(run(str(config), "--dry-run"), f"deep.yaml: not valid YAML: nested deeper than {MAX_YAML_DEPTH} levels")
    chain = "".join(f"a{i}: &a{i} [*a{i - 1}]\n" if i else "a0: &a0 [1]\n" for i in range(2 * MAX_YAML_DEPTH))
    with pytest.raises(ConfigError, match=f"x: its aliases nest deeper than {MAX_YAML_DEPTH} levels"):
        parse_yaml(chain, "x")


def test_a_duplicate_key_is_refused_naming_both_lines(tmp_path: Path) -> None:
    """YAML keeps the last of two equal keys silently: a sweep of 'repetitions: 10' then,
    further down, 'repetitions: 1' ran once."""
    config = tmp_path / "twice.yaml"
    config.write_text(MAIN_CONFIG.read_text() + "repetitions: 7\n")
    lines = config.read_text().splitlines()
    first = next(i for i, line in enumerate(lines, 1) if line.startswith("repetitions:"))
    refused(run(str(config), "--dry-run"),
            f"twice.yaml: key 'repetitions' appears twice in one mapping (lines {first} and {len(lines)}); YAML keeps only the last")
    with pytest.raises(ConfigError, match=r"key 'k' appears twice in one mapping \(line 1, columns 2 and 8\)"):
        parse_yaml("{k: 1, k: 2}", "--set x")
    # A merge key is no duplicate: overriding what it merges is what it is for.
    assert parse_yaml("base: &b {k: 1, j: 2}\nuse:\n  <<: *b\n  k: 3\n", "x")["use"] == {"k": 3, "j": 2}


def test_a_duplicate_key_in_a_topology_or_a_lab_catalog_is_refused(tmp_path: Path) -> None:

    topology = tmp_path / "star.yaml"
    topology.write_text((REPO_ROOT / "topologies" / "star.yaml").read_text() + "workers: 3\n")
    with pytest.raises(ConfigError, match="star.yaml: key 'workers' appears twice"):
        load_topology(topology)
    lab = tmp_path / "lab.yaml"  # load_lab reads folder/lab.yaml
    lab.write_text("title: one\ntitle: two\n")
    with pytest.raises(ConfigError, match=r"lab.yaml: key 'title' appears twice in one mapping \(lines 1 and 2\)"):
        load_lab(tmp_path)


# --- names and folders --------------------------------------------------------------------------------------------


def test_a_name_longer_than_a_file_system_takes_is_refused_at_the_dry_run() -> None:
    """It passed the dry run, and the run failed with four chained OSError tracebacks."""
    refused(run(str(MAIN_CONFIG), "--dry-run", "--set", f"name={LONG_NAME}"), "name: ")
    refused(run(str(MAIN_CONFIG), "--dry-run", "--simulate", "--set", f"name={LONG_NAME}"), "is too long")


@pytest.mark.parametrize("simulate", [[], ["--simulate"]], ids=["emulated", "simulated"])
def test_the_dry_run_checks_out_and_resume(tmp_path: Path, simulate: list[str]) -> None:
    """--dry-run checked neither: it said all was well for a folder the run then refused."""
    dry = [str(MAIN_CONFIG), "--dry-run", *simulate]
    refused(run(*dry, "--out", str(tmp_path / LONG_NAME)), "is 300 bytes long; a file system takes at most 255")
    (tmp_path / "file").write_text("")
    refused(run(*dry, "--out", str(tmp_path / "file" / "run")), "is a file, not a folder")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "runs.csv").write_text("")
    refused(run(*dry, "--out", str(tmp_path / "used")), "folder is not empty")
    refused(run(*dry, "--resume", str(tmp_path / "none")), "no such folder")
    refused(run(*dry, "--resume", str(tmp_path / "used")), "not a run folder (it has no config.yaml)")
    refused(run(*dry, "--resume", str(tmp_path / LONG_NAME)), "is 300 bytes long")
    assert run(*dry, "--out", str(tmp_path / "new" / "run")).returncode == 0
    assert not (tmp_path / "new").exists(), "a dry run creates nothing"


# --- a failing rank's report ----------------------------------------------------------------------------------------


class LoopbackHost:
    """A host for WorkerGroup outside Mininet: the test's own namespace."""
    name = "lo"

    def popen(self, argv: list[str], **options: object) -> subprocess.Popen:
        return subprocess.Popen(argv, **options)


def test_a_rank_log_that_is_not_utf8_is_quoted_in_the_failure(tmp_path: Path) -> None:
    """The report crashed with UnicodeDecodeError (read_text), losing the rank and its error."""
    spec = WorkerSpec(method="ps", n_workers=1, switch_ipv4="127.0.0.254", link_mbps=None, protocol=None,
                      peers=(("127.0.0.1", 47999),), job_timeout_s=2.0, connect_timeout_s=10.0,
                      serve="tests.data.undecodable_log:serve").write(tmp_path / "ps.json")
    with WorkerGroup("ps", [LoopbackHost()], spec, tmp_path, Limit("limits.worker_exit_s", 10)) as group:
        with pytest.raises(WorkerFailure) as failure:
            group.start(Limit("limits.worker_start_s", 30))
    message = str(failure.value)
    assert message.startswith("ps: worker rank 0 on lo: "), message
    assert r"d\xe9j\xe0 vu \xff\xfe" in message and "the script's own error" in message, message


# --- dnn_benchmark CSV traces ---------------------------------------------------------------------------------------


def test_a_csv_trace_is_bounded_and_may_start_with_a_byte_order_mark(tmp_path: Path) -> None:
    """10^7 rows were still parsing after 300 s at 2.6 GB; Excel's "CSV UTF-8" (a BOM first) was refused."""
    rows = "layer_index,numel,forward_pass_ns,backward_pass_ns\n0,1000,50,100\n1,2000,60,120\n"
    excel = tmp_path / "excel.csv"
    excel.write_bytes(b"\xef\xbb\xbf" + rows.replace("\n", "\r\n").encode())
    trace = load_trace(excel)
    assert [t.count for t in trace.tensors] == [1000, 2000]
    huge = tmp_path / "huge.csv"
    with huge.open("w") as f:
        f.write(rows)
        f.writelines(f"{i},1,1,1\n" for i in range(2, MAX_YAML_BYTES // 8))
    with pytest.raises(TraceError, match=rf"huge.csv: [0-9,]+ bytes; a CSV file here may have at most {MAX_YAML_BYTES:,}"):
        load_trace(huge)


# --- resuming -------------------------------------------------------------------------------------------------------


def test_the_resume_command_of_a_simulated_run_keeps_simulate(tmp_path: Path) -> None:
    """An interrupted --simulate run printed a command without --simulate, which --resume refuses
    (the run ran on the simulated clock). The analysis, which has only the folder, reads the
    clock from network.json."""


    run_dir = tmp_path / "run"
    run_dir.mkdir()
    assert "--simulate" not in shlex.split(resume_command(run_dir))
    (run_dir / "network.json").write_text(json.dumps({"0": {"simulated": True}}))
    assert shlex.split(resume_command(run_dir))[-1] == "--simulate"
    assert "--simulate" not in shlex.split(resume_command(run_dir, simulated=False))


# --- make paper -----------------------------------------------------------------------------------------------------


def make_variable(name: str) -> set[str]:
    """The words of a Makefile variable (``NAME := a b \\`` continued on the next lines)."""
    text = (REPO_ROOT / "Makefile").read_text().replace("\\\n", " ")
    [line] = [line for line in text.splitlines() if line.startswith(f"{name} :=")]
    return set(line.split(":=", 1)[1].split())


def test_make_paper_runs_every_figure_config_or_says_why_not() -> None:
    """It skipped hierarchical.yaml and shared_switch.yaml, while the README said it ran every
    figure's config."""
    shipped = {p.stem for p in (REPO_ROOT / "configs").glob("*.yaml") if not p.name.endswith(".schema.yaml")}
    paper, left_out, simulated = make_variable("PAPER_CONFIGS"), make_variable("NOT_IN_PAPER"), make_variable("PAPER_SIM_CONFIGS")
    assert {"hierarchical", "shared_switch"} <= paper
    assert not paper & left_out
    assert paper | left_out | {name for name in shipped if name.startswith("paper_")} == shipped
    assert simulated <= shipped


@pytest.mark.parametrize("config", sorted((REPO_ROOT / "configs").glob("paper_*.yaml")), ids=lambda p: p.stem)
def test_a_paper_scale_config_is_refused_without_simulate(config: Path) -> None:
    """They passed --dry-run without --simulate and planned a doomed 100 Gbit/s emulated run."""
    done = run(str(config), "--dry-run")
    refused(done, f"{config.name}")
    assert errors(done)[0].endswith("--simulate") or "hosts; an emulated run takes at most 32" in errors(done)[0], done.stderr
    assert run(str(config), "--dry-run", "--simulate").returncode == 0


# --- paths in a config ----------------------------------------------------------------------------------------------


def test_workload_files_are_found_next_to_the_config_like_the_topology(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """topology.file was relative to the config, workload.model and workload.script to the
    current folder: a config with its trace beside it worked from one folder only."""
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "mine.csv").write_text("layer_index,numel,forward_pass_ns,backward_pass_ns\n0,1000,50,100\n")
    (folder / "mine.yaml").write_text("topology: {file: star.yaml, workers: 2}\nmethods: [switchml]\n"
                                      "workload: {kind: trace, model: mine.csv}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    experiment = load_experiment(folder / "mine.yaml")
    assert experiment.data["workload"]["model"] == str(folder / "mine.csv")
    # The shipped DDP config finds its script from any folder, and a --set path typed at the shell still counts from here.
    ddp = yaml.safe_load((REPO_ROOT / "configs" / "ddp_script.yaml").read_text())

    resolve_workload_files(ddp, REPO_ROOT / "configs" / "ddp_script.yaml")
    assert ddp["workload"]["script"] == str(REPO_ROOT / "examples" / "ddp_digits.py")
    monkeypatch.chdir(REPO_ROOT)
    typed = {"workload": {"script": "examples/ddp_tutorial.py"}}
    resolve_workload_files(typed, REPO_ROOT / "configs" / "ddp_script.yaml")
    assert typed["workload"]["script"] == str(REPO_ROOT / "examples" / "ddp_tutorial.py")


# --- loss: a probability ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("override", "message"), [
    ("topology.link.loss=1", 'topology.link.loss: 1 would lose every packet: a number is a probability, not a percentage; for 1 % write "1%" or 0.01'),
    ("topology.link.loss=5", 'for 5 % write "5%" or 0.05'),
    ("topology.link.loss=100%", "topology.link.loss: 100% would lose every packet; give less than 100 %"),
    ("topology.link.loss=1 percent", "topology.link.loss: '1 percent' does not match"),
    ("topology={file: tree.yaml, workers: 4, leaves: 2, uplink: {loss: 1}}", "topology.uplink.loss: 1 would lose every packet"),
])
def test_a_percentage_typed_as_a_loss_probability_is_refused(override: str, message: str) -> None:
    """--set topology.link.loss=1 (meant as 1 %, as the docs and figures speak) passed, and lost every packet."""
    refused(run(str(MAIN_CONFIG), "--dry-run", "--set", override), message)


@pytest.mark.parametrize("loss", ["1%", "1 %", "0.01"])
def test_a_loss_is_a_percentage_with_its_unit_or_a_probability(loss: str) -> None:
    """The unit is in the value: "1%" (as the shipped configs write it) and 0.01 are one loss."""
    [link_loss] = {link.spec.loss for link in load_experiment(MAIN_CONFIG, [f"topology.link.loss={loss}"]).points[0].topology.links}
    assert link_loss == pytest.approx(0.01)


# --- one format for a user's mistake ----------------------------------------------------------------------------------


def test_the_three_commands_report_a_mistake_in_one_format(tmp_path: Path) -> None:
    """run_experiment.py logged '<time> run_experiment ERROR ...', python -m analysis 'ERROR ...'
    and python -m labs 'error: ...': three formats from the tools a user meets first."""
    (tmp_path / "stopped").mkdir()
    (tmp_path / "stopped" / "runs.csv").write_text("")  # a run without its summary.json: none to draw
    commands = {
        "run_experiment": [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(tmp_path / "none.yaml"), "--dry-run"],
        "analysis": [sys.executable, "-m", "analysis", str(tmp_path / "stopped"), "--out", str(tmp_path / "figures")],
        "labs": [sys.executable, "-m", "labs", "plot", "0", "--results", str(tmp_path / "none"), "--out", str(tmp_path / "figures")],
    }
    for tool, argv in commands.items():
        done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO_ROOT, stdin=subprocess.DEVNULL, timeout=120)
        assert done.returncode == 2, (tool, done.stderr)
        [line] = [line for line in done.stderr.splitlines() if " ERROR " in line or "error" in line.lower()]
        assert re.fullmatch(rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d,\d{{3}} {tool} ERROR \S.*", line), (tool, line)


# --- memory ------------------------------------------------------------------------------------------------------------


def test_the_memory_check_reads_the_memory_cgroup_limit(tmp_path: Path) -> None:
    """16 workers x 16 Mi elements in a 3 GB memory cgroup (as in a container) passed the check,
    which read the machine's physical memory, and were OOM-killed 6.8 s later with no line."""
    limit = 3 << 30
    dry = [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(MAIN_CONFIG), "--dry-run", "--switch", "embedded", "--set", "topology.workers=16"]
    with capped_group("test-memory-check", memory_bytes=limit) as group:
        if "memory" in group.missing:
            pytest.skip(f"no memory cgroup can be made here: {group.missing['memory']}")
        cgroup = next(cgroup for cgroup in group.cgroups if "memory" in cgroup.controllers)
        done = [subprocess.run([*dry, "--set", f"workload.elements={elements}"], capture_output=True, text=True, timeout=120,
                               stdin=subprocess.DEVNULL, preexec_fn=group.join) for elements in (16 << 20, 6 << 20)]
    limited = f"the limit of memory cgroup {cgroup.path} (memory.limit_in_bytes) is {limit / 1e9:.1f} GB"
    if cgroup.version == 2:
        limited = limited.replace("memory.limit_in_bytes", "memory.max")
    refused(done[0], f"16,777,216 elements x 16 workers need about 6.5 GB of memory even on the simulated clock, which needs the least "
                     f"(24 bytes per element and worker and 0.07 GB besides); {limited}")
    refused(done[1], f"6,291,456 elements x 16 workers need about 3.4 GB of memory in an emulated run (31 bytes per element and "
                     f"worker and 0.24 GB besides); {limited}")
    # Outside it (on a machine with the memory), the same dry runs pass.
    if memory_limit()[0] > 9e9:
        assert subprocess.run([*dry, "--set", f"workload.elements={16 << 20}"], capture_output=True, timeout=120).returncode == 0


def test_the_memory_model_is_within_20_percent_of_the_measured_peaks() -> None:
    """The check counted 12 bytes per element and worker; runs peaked at 23-26 (issue 44).
    The peaks measured for docs/memory.md (benchmarks/memory_peak.py: a memory cgroup's
    max_usage_in_bytes, float32, this machine): the model must stay within 20 % of each."""
    measured = [  # (model, elements, workers, peak bytes)
        (EMULATED_MEMORY, 1 << 20, 8, 492_462_080), (EMULATED_MEMORY, 4 << 20, 8, 1_259_937_792),
        (SIMULATED_MEMORY, 1 << 16, 32, 120_262_656), (SIMULATED_MEMORY, 1 << 18, 32, 272_334_848),
        (SIMULATED_MEMORY, 1 << 20, 32, 884_092_928), (SIMULATED_MEMORY, 4 << 20, 32, 3_331_313_664),
    ]
    for model, elements, workers, peak in measured:
        assert abs(model.needed([(elements, workers)]) - peak) <= 0.2 * peak, (model.clock, elements, workers)


# --- cleanup ------------------------------------------------------------------------------------------------------------


def test_a_server_out_of_reach_at_teardown_is_named_with_why_and_written_down(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                              caplog: pytest.LogCaptureFixture) -> None:
    """ssh -q to a server out of reach says nothing and exits 255: the teardown logged
    'cleanup failed: ' with nothing after the colon, and nothing recorded what stayed there."""
    monkeypatch.setattr(cleanup, "LEFTOVERS_RECORD", tmp_path / "leftovers.log")
    argv = ["sh", "-c", "exit 255", "10.233.0.99", "cd /srv && python -m network.cleanup --holder 1"]
    assert cleanup.run_remote_cleanup("srv9", argv) is None
    [message] = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert message == f"server srv9: cleanup failed: not reachable over ssh (ssh exited with status 255) (written down in {tmp_path / 'leftovers.log'})"
    [line] = (tmp_path / "leftovers.log").read_text().splitlines()
    assert "server srv9: what a run left there was not removed (not reachable over ssh" in line and "network.cleanup --holder 1" in line
    assert cleanup.run_remote_cleanup("srv9", ["sh", "-c", "echo 'network.cleanup INFO removed folder /x' >&2"]) == \
        "network.cleanup INFO removed folder /x"


def test_an_interrupted_simulated_run_prints_a_resume_command_with_simulate(tmp_path: Path) -> None:
    """It printed 'run_experiment.py .../config.yaml --resume ...' without --simulate, which
    --resume then refused: the run ran on the simulated clock."""
    out = tmp_path / "run"
    runner = subprocess.Popen([sys.executable, str(REPO_ROOT / "run_experiment.py"), str(MAIN_CONFIG), "--simulate", "--out", str(out),
                               "--set", "workload.elements=4194304", "--set", "repetitions=20"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (out / "config.yaml").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(2.0)  # into the first repetition
        runner.send_signal(signal.SIGINT)
        _, stderr = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
    assert runner.returncode == 130, stderr[-2000:]
    [line] = [line for line in stderr.splitlines() if " ERROR " in line]
    command = shlex.split(line.split("(continue with ", 1)[1].rstrip(")"))
    assert command == ["run_experiment.py", str(out / "config.yaml"), "--resume", str(out), "--simulate"], line
    resumed = run(str(out / "config.yaml"), "--resume", str(out), "--simulate", "--dry-run")
    assert resumed.returncode == 0, resumed.stderr
