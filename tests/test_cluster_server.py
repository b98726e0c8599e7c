"""The cluster tests' second server is a server of its own: nothing of this machine's is
reachable on it but over its veth, so a remote call that works against it does not work
by accident (tests/cluster_server.py)."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from protocol.params import REPO_ROOT
from tests import cluster_server as second

pytestmark = pytest.mark.cluster


def _remote(server: second.Server, command: str) -> str:
    answer = server.ssh(command)
    assert answer.returncode == 0, answer.stderr
    return answer.stdout.strip()


def test_it_has_its_own_namespaces(cluster_server: second.Server) -> None:
    assert _remote(cluster_server, "hostname") == second.NAME != socket.gethostname()
    assert _remote(cluster_server, "cat /proc/1/comm") == "sshd"  # its own PID namespace, sshd its first process
    for kind in ("net", "mnt", "uts", "pid"):
        assert _remote(cluster_server, f"readlink /proc/self/ns/{kind}") != os.readlink(f"/proc/self/ns/{kind}")
    assert _remote(cluster_server, "ip -o -4 addr show dev eth0").split()[3] == f"{second.SERVER_ADDRESS}/{second.PREFIX_LEN}"


def test_it_sees_none_of_this_machines_files_sockets_or_pins(cluster_server: second.Server, tmp_path_factory) -> None:
    marker = tmp_path_factory.getbasetemp() / "visible-here"
    marker.write_text("x")
    assert _remote(cluster_server, f"test -e {marker} && echo seen || echo unseen") == "unseen"
    assert _remote(cluster_server, f"ls -A {REPO_ROOT} | wc -l") == "0"  # the controlling checkout is hidden
    assert _remote(cluster_server, "ls -A /run/lock | wc -l") == "0"  # no network lock of ours
    assert _remote(cluster_server, "ls /sys/class/net | sort | tr '\\n' ' '").split() == ["eth0", "lo"]


def test_its_checkout_is_its_own_at_this_commit(cluster_server: second.Server) -> None:
    here = subprocess.run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    checkout = cluster_server.checkout
    assert _remote(cluster_server, f"git -C {checkout} rev-parse HEAD") == here
    imported = _remote(cluster_server, f"cd /tmp && {checkout}/.venv/bin/python -c 'import switches, sys; print(switches.__file__)'"
                       f" 2>&1 || true")
    assert "No module named 'switches'" in imported  # the venv does not reach back to this checkout
    found = _remote(cluster_server, f"cd {checkout} && .venv/bin/python -c 'import numpy, switches, mininet; print(switches.__file__)'")
    assert found == f"{checkout}/switches/__init__.py"
