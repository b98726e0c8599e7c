"""The emulated network over two servers (network/cluster.py): the second server is
tests/cluster_server.py's, reached only over ssh and VXLAN. Each run is the real command, as
small as shows the point (4 workers, 64k elements, one repetition), and every test checks
afterwards that neither server keeps an interface, namespace, process or file of the run."""

from __future__ import annotations

import contextlib
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from protocol.params import REPO_ROOT
from tests import cluster_server as second
from tests.conftest import TARGET_MARKS, require_target, require_torch
from tests.experiment_runs import leftovers, wait_for_process

pytestmark = [pytest.mark.cluster, pytest.mark.mininet]

RUN_TIMEOUT_S = 300
SMALL_RUN = {
    "topology": {"file": "star.yaml", "workers": 4, "link": {"bw_mbps": 5, "delay_ms": 0, "loss": 0, "queue_packets": 200}},
    "protocol": {"k": 256, "pool_size": 32, "timeout_ms": 20},
    "workload": {"kind": "synthetic", "elements": 65536, "dtype": "float32", "seed": 1},
    "methods": ["switchml", "ring", "ps"],
    "repetitions": 1,
}
LONG_JOB = {"workload": {"kind": "synthetic", "elements": 4194304, "dtype": "float32", "seed": 1}, "methods": ["switchml"],
            "limits": {"job_timeout_s": 120}}
"""A job that is still running when a test disturbs it (16,384 packets per worker at 5 Mbit/s)."""


def cluster_config(tmp_path: Path, server: second.Server, **sections) -> Path:
    """A config over this machine and ``server``; ``sections`` replace SMALL_RUN's."""
    config = {"name": "cluster", **SMALL_RUN, **sections}
    config.setdefault("cluster", {"servers": [{"name": server.name, "address": server.address, "checkout": str(server.checkout)}],
                                  "ssh_config": str(server.ssh_config)})
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def argv(config: Path, out: Path, target: str = "embedded") -> list[str]:
    return [sys.executable, str(REPO_ROOT / "run_experiment.py"), str(config), "--out", str(out), "--switch", target]


def run(config: Path, out: Path, target: str = "embedded") -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv(config, out, target), capture_output=True, text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)


def remote_leftovers(server: second.Server, marker: str) -> list[str]:
    """What a run left on the second server: processes besides its sshd, interfaces besides
    its own, files of the run (copied to the same paths there)."""
    answer = server.ssh(f"ps -eo pid=,args= ; echo --; ls /sys/class/net; echo --; test -e {marker} && echo {marker} || true")
    assert answer.returncode == 0, answer.stderr
    processes, interfaces, files = (part.split("\n") for part in answer.stdout.split("--\n"))
    found = [f"process {p.strip()}" for p in processes if p.strip() and "sshd" not in p and "ps -eo" not in p and "echo --" not in p]
    found += [f"interface {i}" for i in interfaces if i and i not in ("lo", "eth0")]
    return found + [f"file {f}" for f in files if f]


@pytest.mark.parametrize("target", [pytest.param(t, marks=TARGET_MARKS[t], id=t) for t in ("embedded", "ebpf", "bmv2")])
def test_a_star_split_over_two_servers_runs_every_method_verified(tmp_path: Path, cluster_server: second.Server, target: str) -> None:
    require_target(target)
    out = tmp_path / "out"
    # VNI 1 still taken there, as a killed run's can be for minutes (network/cluster.py, first_vni).
    ghost = f"ip link add smlghost type vxlan id 1 local {second.SERVER_ADDRESS} remote {second.ROOT_ADDRESS} dstport 4789"
    assert cluster_server.ssh(ghost).returncode == 0
    try:
        done = run(cluster_config(tmp_path, cluster_server), out, target)
    finally:
        cluster_server.ssh("ip link del smlghost")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True
    assert summary["switch_lost_frames"] == []  # every frame a port took in or sent is in the switch's counters
    servers = json.loads((out / "network.json").read_text())["0"]["servers"]
    assert servers == {"h1": "local", "h2": "local", "h3": second.NAME, "h4": second.NAME, "s1": "local"}
    rows = (out / "runs.csv").read_text().splitlines()
    assert {row.split(",")[3] for row in rows[1:]} == {"switchml", "ring", "ps"}
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))


@pytest.mark.torch
def test_gloo_over_two_servers_verifies_and_its_frames_add_up(tmp_path: Path, cluster_server: second.Server) -> None:
    """PyTorch's Gloo ranks on both servers (the venv there has torch too). Its connections
    carry frames between jobs, so a meter that read another server's CPU between resetting
    the switch's counters and reading its ports counted a few frames in the switch only."""
    require_torch()
    out = tmp_path / "out"
    done = run(cluster_config(tmp_path, cluster_server, methods=["switchml", "gloo"]), out)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True and summary["switch_lost_frames"] == []
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))


@pytest.mark.torch
def test_a_users_ddp_script_outside_the_checkout_runs_over_two_servers(tmp_path: Path, cluster_server: second.Server) -> None:
    """kind ddp_script with the script in a folder of the user's: it is copied to the second
    server's hosts like their other inputs, and the SwitchML DDP hook's bucket files come back
    from them (gloo over both servers: the test above)."""
    require_torch()
    script = tmp_path / "mine" / "train.py"
    script.parent.mkdir()
    script.write_text((REPO_ROOT / "examples" / "ddp_digits.py").read_text())
    out = tmp_path / "out"
    done = run(cluster_config(tmp_path, cluster_server, workload={"kind": "ddp_script", "script": str(script), "args": ["--steps", "3"]},
                              methods=["switchml"], protocol={"k": 256, "pool_size": 16},
                              limits={"worker_start_s": 180, "job_timeout_s": 300}), out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["verified"] is True
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(tmp_path))


def test_a_server_that_cannot_build_the_native_loop_runs_the_python_worker_and_says_so(tmp_path: Path,
                                                                                       cluster_server: second.Server) -> None:
    """``auto`` where the second server cannot build worker.c (here: its build cache is a file,
    so nothing can be built there): every worker of the run takes the Python loop, the run
    says so in one line naming the server, and the results verify; ``native`` is refused
    there before anything is built (experiments/data_path.py)."""
    cache = f"{cluster_server.checkout}/build/native"
    assert cluster_server.ssh(f"mkdir -p {cache} && mv {cache} {cache}.saved && touch {cache}").returncode == 0
    try:
        out = tmp_path / "out"
        done = run(cluster_config(tmp_path, cluster_server, methods=["switchml"]), out)
        refused = run(cluster_config(tmp_path, cluster_server, methods=["switchml"], protocol={"k": 256, "data_path": "native"}),
                      tmp_path / "refused")
    finally:
        cluster_server.ssh(f"rm -f {cache} && mv {cache}.saved {cache}")
    assert done.returncode == 0, done.stderr[-3000:]
    said = [line for line in done.stderr.splitlines() if "lacks the native data path" in line]
    assert len(said) == 1 and f"server {second.NAME} lacks the native data path" in said[0] and "WARNING" in said[0], done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["verified"] is True
    assert summary["data_path"]["requested"] == "auto" and summary["data_path"]["used"] == "python"
    assert f"server {second.NAME}" in summary["data_path"]["reason"]
    assert refused.returncode == 2, refused.stderr[-2000:]
    errors = [line for line in refused.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"server {second.NAME}: protocol.data_path: native: " in errors[0], refused.stderr[-2000:]
    assert not (tmp_path / "refused").exists() and not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))


def test_a_server_at_another_commit_is_one_line_and_exit_2(tmp_path: Path, cluster_server: second.Server) -> None:
    older = "/tmp/switchml-older-checkout"
    made = cluster_server.ssh(f"rm -rf {older} && git clone -q --shared {cluster_server.checkout} {older} && git -C {older} checkout -q HEAD~1")
    assert made.returncode == 0, made.stderr
    try:
        config = cluster_config(tmp_path, cluster_server, cluster={
            "servers": [{"name": cluster_server.name, "address": cluster_server.address, "checkout": older}],
            "ssh_config": str(cluster_server.ssh_config)})
        done = run(config, tmp_path / "out")
    finally:
        cluster_server.ssh(f"rm -rf {older}")
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and f"ERROR server {second.NAME}: {older} is at commit " in errors[0], done.stderr[-2000:]
    assert errors[0].endswith("check out the same commit there") and "Traceback" not in done.stderr


def test_a_server_with_other_uncommitted_changes_is_one_line_and_exit_2(tmp_path: Path, cluster_server: second.Server) -> None:
    """The same commit with another edit there would run other code: refused before building."""
    readme = f"{cluster_server.checkout}/README.md"
    assert cluster_server.ssh(f"echo edited there >> {readme}").returncode == 0
    try:
        done = run(cluster_config(tmp_path, cluster_server), tmp_path / "out")
    finally:
        second.sync()
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert len(errors) == 1 and errors[0].endswith(f"server {second.NAME}: {cluster_server.checkout} has other uncommitted changes "
                                                   "than this checkout (git diff HEAD); commit them here and check out that commit there")


def test_an_unreachable_server_is_one_line_and_exit_2(tmp_path: Path, cluster_server: second.Server) -> None:
    config = cluster_config(tmp_path, cluster_server, cluster={
        "servers": [{"name": "gone", "address": "10.233.0.99", "checkout": str(cluster_server.checkout)}],
        "ssh_config": str(cluster_server.ssh_config)})
    done = run(config, tmp_path / "out")
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert any("server gone: not reachable over ssh at root@10.233.0.99" in e for e in errors), done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def _disturbed(tmp_path: Path, server: second.Server, disturb, **sections) -> tuple[int, str, Path]:
    """A long SwitchML job over both servers, disturbed once a worker runs on the second."""
    out = tmp_path / "out"
    runner = subprocess.Popen(argv(cluster_config(tmp_path, server, **{**LONG_JOB, **sections}), out), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while server.ssh("pgrep -f hosts.worker").returncode != 0:
            assert runner.poll() is None and time.monotonic() < deadline, runner.stdout.read() if runner.poll() is not None else "no worker"
            time.sleep(0.3)
        time.sleep(1.0)  # mid-job
        disturb(runner)
        output, _ = runner.communicate(timeout=120)
    finally:
        if runner.poll() is None:
            runner.kill()
    return runner.returncode, output, out


def test_a_killed_remote_worker_fails_the_run_naming_it(tmp_path: Path, cluster_server: second.Server) -> None:
    def kill_remote_worker(runner: subprocess.Popen) -> None:
        # The worker's Python only, not the shell its ssh session runs it from.
        assert cluster_server.ssh("pkill -9 -f '^[^ ]*python[^ ]* -m hosts.worker .* --rank 3'").returncode == 0

    code, output, out = _disturbed(tmp_path, cluster_server, kill_remote_worker)
    assert code == 3, output[-3000:]
    assert "switchml: worker rank 3 on h4: exited with status 137" in output  # 128 + SIGKILL, its shell's status, through ssh
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))


def test_a_stopped_remote_worker_is_named_as_stopped_at_its_deadline(tmp_path: Path, cluster_server: second.Server) -> None:
    """SIGSTOP of a worker there: its ssh client here runs on, so the runner reads the rank's
    state on its server (by the pid its 'ready' gave) and names it, as on one machine."""
    def stop_remote_worker(runner: subprocess.Popen) -> None:
        assert cluster_server.ssh("pkill -STOP -f '^[^ ]*python[^ ]* -m hosts.worker .* --rank 3'").returncode == 0

    eighth = {"kind": "synthetic", "elements": 524288, "dtype": "float32", "seed": 1}  # >= 3.5 s at 5 Mbit/s: stopped mid-job
    code, output, out = _disturbed(tmp_path, cluster_server, stop_remote_worker, workload=eighth, limits={"job_timeout_s": 5})
    assert code == 3, output[-3000:]
    assert re.search(rf"worker rank 3 on h4: \(pid \d+ on server {second.NAME}\) is stopped \(state T", output), output[-3000:]
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))


def test_a_cut_ssh_connection_fails_the_run_naming_what_went_with_it(tmp_path: Path, cluster_server: second.Server) -> None:
    def cut_ssh(runner: subprocess.Popen) -> None:  # the multiplexed connection every command to the server goes through
        master = wait_for_process(r"^ssh: /tmp/switchml-net-[^ ]*/ssh/[0-9a-f]+ \[mux\]", timeout=5)
        subprocess.run(["kill", "-9", str(master)], check=True)

    code, output, out = _disturbed(tmp_path, cluster_server, cut_ssh)
    assert code == 3, output[-3000:]
    assert re.search(rf"the shell of host h[34] on server {second.NAME} \(its ssh connection\) \(pid \d+\) exited with status 255",
                     output), output[-3000:]
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))


def test_a_runner_killed_with_sigkill_leaves_the_second_server_to_the_next_cleanup(tmp_path: Path, cluster_server: second.Server) -> None:
    def kill_runner(runner: subprocess.Popen) -> None:
        runner.send_signal(signal.SIGKILL)

    code, _, out = _disturbed(tmp_path, cluster_server, kill_runner)
    assert code == -signal.SIGKILL
    cleanup = subprocess.run([sys.executable, "-m", "network.cleanup"], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT)
    assert cleanup.returncode == 0, cleanup.stderr
    assert "on another server: " in cleanup.stderr, cleanup.stderr
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))


TREE = {"file": "tree.yaml", "workers": 4, "leaves": 2, "aggregation": "hierarchical",
        "link": {"bw_mbps": 5, "delay_ms": 0, "loss": 0, "queue_packets": 200},
        "uplink": {"bw_mbps": 20, "delay_ms": 0, "loss": 0, "queue_packets": 200}}
"""Leaf s2 with h1 and h3 here, leaf s3 with h2 and h4 on the second server: only s3's uplink to
the spine s1 (here) crosses servers, and hierarchical aggregation sends one partial sum per
slot over it."""


@pytest.mark.parametrize("target", [pytest.param(t, marks=TARGET_MARKS[t], id=t) for t in ("embedded", "ebpf", "bmv2")])
def test_a_tree_with_a_leaf_on_the_second_server_and_loss_on_its_uplinks_recovers_exactly(tmp_path: Path, cluster_server: second.Server,
                                                                                           target: str) -> None:
    """Every method over the tree, 1 % of the frames on both uplinks (one of them across the
    servers) dropped by the switches: SwitchML retransmits and its sums are still bit-exact,
    the TCP baselines recover on their own."""
    require_target(target)
    lossy = {**TREE, "uplink": {**TREE["uplink"], "loss": 0.01}}
    out = tmp_path / "out"
    done = run(cluster_config(tmp_path, cluster_server, topology=lossy), out, target)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["verified"] is True
    servers = json.loads((out / "network.json").read_text())["0"]["servers"]
    assert servers == {"s1": "local", "s2": "local", "h1": "local", "h3": "local", "s3": second.NAME, "h2": second.NAME, "h4": second.NAME}
    assert (out / "logs" / "point0" / "s3.agent.log").exists()  # the leaf's switch ran there, started by its agent
    rows = [line.split(",") for line in (out / "runs.csv").read_text().splitlines()]
    header = rows[0]
    assert sum(int(row[header.index("retransmissions")]) for row in rows[1:] if row[header.index("method")] == "switchml") > 0
    measured = {line.split(",")[3] for line in (out / "fidelity.csv").read_text().splitlines()[1:]}
    assert {"h2", "h4", "machine@" + second.NAME} <= measured  # read on the second server, by their pids there
    assert ("s3" in measured) == (target != "ebpf")  # the eBPF switch has no process; its agent's ssh is not it
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))


def test_a_killed_remote_switch_fails_the_run_naming_it(tmp_path: Path, cluster_server: second.Server) -> None:
    def kill_remote_switch(runner: subprocess.Popen) -> None:  # the leaf on the second server, the embedded switch's process
        assert cluster_server.ssh("pkill -9 -f 'switches.embedded .*s3-eth'").returncode == 0

    code, output, out = _disturbed(tmp_path, cluster_server, kill_remote_switch, topology=TREE)
    assert code == 3, output[-3000:]
    assert re.search(r"switch s3 \(pid \d+\) exited with status 3", output), output[-3000:]
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))


def test_ctrl_c_tears_down_both_servers(tmp_path: Path, cluster_server: second.Server) -> None:
    def interrupt(runner: subprocess.Popen) -> None:
        runner.send_signal(signal.SIGINT)

    code, output, out = _disturbed(tmp_path, cluster_server, interrupt)
    assert code == 130, output[-3000:]
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))


TRAINING = {"kind": "training", "dataset": "digits", "hidden_units": 16, "batch_size": 16, "learning_rate": 0.5, "steps": 20,
            "test_fraction": 0.2, "seed": 1}
"""A short training run: every step's gradient all-reduced by workers on both servers."""
TWO_JOBS = [{"job_id": 11, "hosts": [0, 2], "pool_size": 32, "start_s": 0},
            {"job_id": 12, "hosts": [1, 3], "pool_size": 32, "elements": 32768, "start_s": 0.2}]
"""Two jobs on one switch, each with a worker on either server (h1, h2 here; h3, h4 there)."""


@pytest.mark.parametrize("sections", [
    pytest.param({"workload": TRAINING}, id="training"),
    pytest.param({"jobs": TWO_JOBS, "methods": ["switchml"]}, id="several-jobs"),
])
def test_training_and_several_jobs_run_over_two_servers_verified(tmp_path: Path, cluster_server: second.Server,
                                                                 sections: dict) -> None:
    out = tmp_path / "out"
    done = run(cluster_config(tmp_path, cluster_server, **sections), out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["verified"] is True
    servers = json.loads((out / "network.json").read_text())["0"]["servers"]
    assert servers["h3"] == servers["h4"] == second.NAME
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))


@contextlib.contextmanager
def read_only_tmp(server: second.Server) -> Iterator[None]:
    """The second server's /tmp (where a run keeps its files there: the same paths as here)
    read-only, as a failing disk is remounted, until the block ends."""
    try:
        yield
    finally:
        assert server.ssh("mount -o remount,rw /tmp").returncode == 0


def test_a_server_whose_disk_is_read_only_is_refused_before_the_run_in_one_line(tmp_path: Path, cluster_server: second.Server) -> None:
    """It gave exit 3 and a ClusterError traceback: the preflight checked tools, commit and
    MTU, but not that the server can write where the run keeps its files."""
    with read_only_tmp(cluster_server):
        assert cluster_server.ssh("mount -o remount,ro /tmp").returncode == 0
        done = run(cluster_config(tmp_path, cluster_server), tmp_path / "out")
    assert done.returncode == 2, done.stderr[-3000:]
    [error] = [line for line in done.stderr.splitlines() if " ERROR " in line]
    assert f"ERROR server {second.NAME}: cannot write in /tmp: Read-only file system, where the run keeps " in error, error
    assert "Traceback" not in done.stderr
    assert not leftovers(str(tmp_path / "out")) and not remote_leftovers(cluster_server, str(tmp_path / "out"))


def test_a_server_disk_turning_read_only_mid_job_is_named_and_what_stays_is_written_down(tmp_path: Path,
                                                                                        cluster_server: second.Server) -> None:
    """Mid-job it gave exit 4 naming the results folder here (writable), not the server's
    file system; the teardown then said it removed the folders there that rmtree(ignore_errors)
    could not remove, and nothing recorded them."""
    record = tmp_path / "leftovers.log"
    with read_only_tmp(cluster_server):
        def remount(runner: subprocess.Popen) -> None:
            assert cluster_server.ssh("mount -o remount,ro /tmp").returncode == 0

        with pytest.MonkeyPatch.context() as env:
            env.setenv("SWITCHML_LEFTOVERS_RECORD", str(record))
            code, output, out = _disturbed(tmp_path, cluster_server, remount)
        assert code == 3, output[-3000:]
        assert re.search(rf"switchml: worker rank [23] on h[34]: .*Read-only file system.* \(a file system of server {second.NAME}, "
                         r"where this rank runs, not this machine's\)", output), output[-3000:]
        assert re.search(rf"server {second.NAME}: cleanup failed: .*could not remove folder {out}\S*: Read-only file system", output), \
            output[-3000:]
        assert f"removed folder {out}" not in output
        [line] = record.read_text().splitlines()
        assert f"server {second.NAME}: what a run left there was not removed (" in line and "network.cleanup --holder" in line
        assert remote_leftovers(cluster_server, str(out)) == [f"file {out}"]
    command = line.split("; remove it with ", 1)[1]
    assert subprocess.run(command, shell=True, capture_output=True, timeout=60).returncode == 0  # the record's command finishes it
    assert not leftovers(str(out)) and not remote_leftovers(cluster_server, str(out))
