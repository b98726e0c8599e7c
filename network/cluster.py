"""The emulated network spread over several servers, on Mininet Cluster Edition.

Debian's Mininet ships its distributed engine as ``mininet/examples/cluster.py``: one
controlling Mininet process; nodes on other servers are ``RemoteMixin`` nodes whose shell
and commands run over ssh (``mnexec`` on the far side); a ``RemoteLink`` between nodes of
two servers is a tunnel made by its ``makeTunnel``. This module uses those extension
points and nothing parallel to them:

- ``ClusterNode`` is ``RemoteMixin`` for our nodes (``ClusterHost`` on Mininet's ``Host``,
  ``cluster_switch_class`` on a switch target's node). It replaces what cluster.py
  gets wrong for this testbed: its ``_popen`` throws away a caller's ``preexec_fn`` (the
  parent-death kill every worker is started with, base/lifetime.py) and calls ``sudo``
  (not installed, and not needed as root); its ssh command is ours (``Cluster.ssh_argv``:
  one multiplexed connection per server, the run's ssh_config). A command for a remote
  node runs in the server's own checkout with its own venv: this checkout's Python, cwd
  and PYTHONPATH become the server's (``Server.translate``; data files are copied to the
  same paths there: ``ship``, ``fetch``), and of the environment only what the caller
  added to this process's is passed on, with the network holder's mark (network/lock.py),
  so the run's cleanup there finds what it left.
- ``VxlanLink`` is a ``RemoteLink`` whose ``makeTunnel`` makes a VXLAN pair (one VNI per
  link, UDP 4789 between the two servers' addresses, MTU 1500 so a full frame fits; the
  underlay needs 1550): this kernel has no GRE, and cluster.py's ssh tunnels carry frames
  over TCP in user space (no timing fidelity, TCP-in-TCP for the baselines) through a
  device name (tap9) that two links at once collide on.
- A switch placed on another server runs there: ``RemoteDataPlane`` starts
  ``python -m switches.agent`` over ssh, which runs the target's data plane and serves its
  control plane there (cluster.py has only RemoteOVSSwitch), on a Unix socket ssh forwards.
- Where each node runs is network/cluster_config.py's ``place`` (Mininet's placers need a
  ``Topo`` object, which this network is built without).

The controlling machine is the server ``LOCAL``; every other server is reached over ssh as
root and must have the same commit checked out, with its venv (``preflight`` checks).
"""

from __future__ import annotations

import io
import itertools
import json
import logging
import os
import shlex
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from mininet.examples.cluster import RemoteLink, RemoteMixin
from mininet.node import Host, Node

from base.lifetime import ThreadWatch, dies_with_this_process
from base.yamlschema import ConfigError
from network.cleanup import run_remote_cleanup
from network.lock import HOLDER_ENV
from protocol.params import REPO_ROOT
from switchml_testbed import release
from switches.control import ControlPlaneError, SwitchControl
from switches.remote_control import SocketControl
from network.cluster_config import LOCAL, ClusterSpec, Server
from topologies.model import Topology

log = logging.getLogger(__name__)

VXLAN_PORT = 4789
VXLAN_OVERHEAD = 50
"""Outer Ethernet, IPv4, UDP and VXLAN headers."""
FRAME_MTU = 1500
"""The emulated links' MTU, on a VXLAN link too: a full frame of the baselines' TCP fits."""
SSH_CONNECT_S = 5
FORWARD_TIMEOUT_S = 20.0
"""How long a remote switch's control socket may take to be reachable through ssh."""
AGENT_STOP_S = 10.0
TOOLS = ("mnexec", "ip", "tc", "ethtool", "git", "tar")
"""What every server needs on its PATH (what a switch target needs, only where one of its switches runs: preflight)."""


VNIS_PER_RUN = 1024


def first_vni(pid: int) -> int:
    """The first VNI of the run ``pid``: each run numbers its VXLAN links from its own block
    of the 24-bit VNI space. A VNI stays taken on a server for as long as the namespace its
    device ended in lives, and a host's namespace outlives its run while a TCP socket of a
    killed worker there is still closing (minutes: an orphan keeps retransmitting); a next
    run counting from 1 again failed with "A VXLAN device with the specified VNI already exists"."""
    return (pid % (1 << 14)) * VNIS_PER_RUN + 1


class ClusterError(RuntimeError):
    """A command on another server of the cluster failed while the network was up."""


class ServerUnavailableError(ConfigError):
    """A server cannot take part (unreachable, another commit, a tool missing): found before
    anything is built, and reported like a config mistake, in one line (exit status 2)."""


@dataclass
class Cluster:
    """The servers of one run, how to reach them, and where each node runs."""

    servers: Mapping[str, Server]
    placement: Mapping[str, str]
    """Node name -> server name (``LOCAL`` or one of ``servers``)."""
    control_dir: Path
    """Where the multiplexed ssh connections' sockets are (short: a socket path has 107 bytes)."""
    ssh_config: Path | None = None
    link: str = "vxlan"
    _vnis: Any = field(default_factory=lambda: itertools.count(first_vni(os.getpid())))
    pushed: dict[str, set[str]] = field(default_factory=dict)
    """Per server, the folders ``push`` made there (the outermost of each)."""
    on_push: Callable[[], None] | None = None
    """Called when ``push`` made a new folder (the network records its cleanup again)."""
    _copied: dict[tuple[str, Path], tuple[int, int]] = field(default_factory=dict)
    """(server, path) -> the size and mtime of the file when ``push`` copied it there."""

    @classmethod
    def start(cls, spec: ClusterSpec, topology: Topology, control_dir: Path) -> Cluster:
        control_dir.mkdir(mode=0o700, exist_ok=True)
        return cls({s.name: s for s in spec.servers}, spec.place(topology), control_dir, spec.ssh_config, spec.link)

    def server_of(self, node: str) -> str:
        return self.placement.get(node, LOCAL)

    def remote_nodes(self) -> list[str]:
        return [name for name, server in self.placement.items() if server != LOCAL]

    def ssh_argv(self, server: str, tty: bool = False, multiplexed: bool = True) -> list[str]:
        """ssh to ``server``: through one master connection per server (persisting a minute),
        unless not ``multiplexed`` (a port forwarding that must end with its own process)."""
        target = self.servers[server]
        argv = ["ssh", "-q"]
        if self.ssh_config is not None:
            argv += ["-F", str(self.ssh_config)]
        argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_S}", "-o", "ServerAliveInterval=2",
                 "-o", "ServerAliveCountMax=3", "-l", target.user]
        if multiplexed:
            argv += ["-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_dir}/%C", "-o", "ControlPersist=60"]
        else:
            argv += ["-o", "ControlPath=none"]
        return [*argv, "-tt" if tty else "-T", target.address]

    def run(self, server: str, command: str, timeout: float = 60.0, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """One shell command on ``server``; its output is bytes."""
        return subprocess.run([*self.ssh_argv(server), command], input=stdin, capture_output=True, timeout=timeout,
                              stdin=None if stdin is not None else subprocess.DEVNULL)

    def check(self, server: str, command: str, what: str, timeout: float = 60.0) -> str:
        """``command`` on ``server``, which must succeed; its output as text."""
        done = self.run(server, command, timeout=timeout)
        if done.returncode != 0:
            said = (done.stderr or done.stdout).decode(errors="replace").strip().splitlines()
            raise ClusterError(f"server {server}: {what}" + (f": {said[0]}" if said else ""))
        return done.stdout.decode(errors="replace")

    def push(self, server: str, paths: Sequence[Path]) -> None:
        """Copy local files to the same paths on ``server`` (a run's inputs and worker specs),
        in one command (an ssh round trip costs 0.1-0.3 s); a file already copied there
        unchanged is not copied again. ``close`` removes their folders there."""
        fresh = [path for path in dict.fromkeys(paths) if self._copied.get((server, path)) != _signature(path)]
        if not fresh:
            return
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            for path in fresh:
                tar.add(path, arcname=str(path).lstrip("/"), recursive=False)
        # per folder, the outermost one mkdir -p makes there, so that the cleanup removes exactly what the copy made
        folders = " ".join(shlex.quote(str(folder)) for folder in sorted({path.parent for path in fresh}))
        command = (f'for f in {folders}; do d=$f; made=; while [ ! -e "$d" ]; do made=$d; d=$(dirname "$d"); done; '
                   f'mkdir -p "$f" && echo "$made" || exit 1; done; tar -xf - -C /')
        done = self.run(server, command, stdin=archive.getvalue())
        if done.returncode != 0:
            raise ClusterError(f"server {server}: copying {', '.join(map(str, fresh))} there failed: "
                               f"{done.stderr.decode(errors='replace').strip()}")
        for path in fresh:
            self._copied[(server, path)] = _signature(path)
        made = {line for line in done.stdout.decode().split() if line} - self.pushed.setdefault(server, set())
        if made:
            self.pushed[server] |= made
            if self.on_push is not None:
                self.on_push()

    def pull(self, server: str, path: Path, remote: str | None = None) -> None:
        """Move a file a worker on ``server`` wrote to the same path here (or from ``remote`` there)."""
        source = shlex.quote(remote or str(path))
        done = self.run(server, f"cat {source} && rm {source}")
        if done.returncode != 0:
            raise ClusterError(f"server {server}: fetching {path} failed: {done.stderr.decode(errors='replace').strip()}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(done.stdout)

    def pull_files(self, server: str, paths: Sequence[Path]) -> None:
        """``pull`` of several files a worker on ``server`` wrote, in one command."""
        names = {str(path).lstrip("/"): path for path in paths}
        done = self.run(server, f"tar -cf - -C / {shlex.join(names)} && cd / && rm -- {shlex.join(names)}")
        if done.returncode != 0:
            raise ClusterError(f"server {server}: fetching {', '.join(map(str, paths))} failed: {done.stderr.decode(errors='replace').strip()}")
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as tar:
            for member in tar:
                source = tar.extractfile(member)
                if member.name not in names or source is None:
                    raise ClusterError(f"server {server}: sent {member.name!r}, which was not asked for")
                names[member.name].parent.mkdir(parents=True, exist_ok=True)
                names[member.name].write_bytes(source.read())

    def next_vni(self) -> int:
        vni = next(self._vnis)
        if vni >= first_vni(os.getpid()) + VNIS_PER_RUN - 1:  # the last block ends at 2^24 - 1
            raise ClusterError(f"more than {VNIS_PER_RUN - 1} links cross servers")
        return vni

    def underlay_address(self, server: str, towards: str) -> str:
        """``server``'s address on the path to the server ``towards`` (the VXLAN endpoints)."""
        if server != LOCAL:
            return self.servers[server].address
        route = subprocess.run(["ip", "-o", "route", "get", self.servers[towards].address], capture_output=True, text=True, check=True)
        words = route.stdout.split()
        return words[words.index("src") + 1]

    def cleanup_argv(self, server: str, holder: int, directories: Sequence[str] = ()) -> list[str]:
        """What removes on ``server`` what the run ``holder`` left there (network.cleanup
        --holder): its marked processes, testbed interfaces, ``directories`` and the folders
        ``push`` made. Without the
        multiplexed connection, whose socket dies with the run: the next run uses this."""
        target = self.servers[server]
        ssh = ["ssh", "-q", *(["-F", str(self.ssh_config)] if self.ssh_config is not None else []),
               "-o", "BatchMode=yes", "-o", f"ConnectTimeout={SSH_CONNECT_S}", "-l", target.user, "-T", target.address]
        folders = sorted({*directories, *self.pushed.get(server, ())})
        command = [target.python, "-m", "network.cleanup", "--holder", str(holder), *(f"--directory={d}" for d in folders)]
        return [*ssh, f"cd {shlex.quote(target.checkout)} && {shlex.join(command)}"]

    def clean_servers(self, holder: int, directories: Sequence[str] = ()) -> None:
        """Run ``cleanup_argv`` on every server (a teardown: errors are logged, not raised)."""
        for server in self.servers:
            said = run_remote_cleanup(server, self.cleanup_argv(server, holder, directories))
            if said is not None:
                log.info("server %s: %s", server, said)

    def close(self) -> None:
        """End the master connections."""
        for server in self.servers:
            subprocess.run([*self.ssh_argv(server), "-O", "exit"], capture_output=True, timeout=10)


def _signature(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns


def ship(node: Node, paths: Sequence[Path]) -> None:
    """Make ``paths`` readable at the same paths on ``node``'s server (nothing for a node here)."""
    if isinstance(node, ClusterHost):
        node.cluster.push(node.server, paths)


def fetch(node: Node, paths: Sequence[Path]) -> None:
    """Bring the files ``node`` wrote at ``paths`` on its server here (nothing for a node here)."""
    if isinstance(node, ClusterHost) and paths:
        node.cluster.pull_files(node.server, paths)


def _own_group_then(caller: Callable[[], None] | None) -> Callable[[], None]:
    """A ``preexec_fn``: the ssh client leads its own process group (a Ctrl-C at the terminal
    reaches the runner, which tears down, not the connections it tears down through), then
    whatever the caller asked for (the parent-death kill)."""

    def prepare() -> None:
        os.setpgrp()
        if caller is not None:
            caller()

    return prepare


class ClusterNode(RemoteMixin):
    """cluster.py's RemoteMixin for this testbed's nodes: a node on one of the cluster's servers."""

    def __init__(self, name: str, cluster: Cluster, **kwargs: Any) -> None:
        self.cluster = cluster
        server = cluster.servers[cluster.server_of(name)]
        super().__init__(name, server=server.name, user=server.user, serverIP=server.address, **kwargs)

    def startShell(self, *args: Any, **kwargs: Any) -> None:  # noqa: N802 (Mininet's name)
        self.sshcmd = self.cluster.ssh_argv(self.server, tty=True)
        super().startShell(*args, **kwargs)

    def _popen(self, cmd: Sequence[str] | str, sudo: bool = True, tt: bool = True, **params: Any) -> subprocess.Popen:
        """cluster.py's ``_popen`` without its faults: keeps the caller's ``preexec_fn``, needs
        no sudo, and runs the command in the server's checkout (``Server.translate``)."""
        argv = cmd.split() if isinstance(cmd, str) else list(cmd)
        server = self.cluster.servers[self.server]
        cwd = params.pop("cwd", None)
        env = params.pop("env", None)
        remote = " ".join(shlex.quote(server.translate(a)) for a in argv)
        remote_env = " ".join(shlex.quote(f"{k}={server.translate(v) if k == 'PYTHONPATH' else v}") for k, v in added_environment(env).items())
        where = f"cd {shlex.quote(server.translate(cwd))} && " if cwd is not None else ""
        # Not exec'd: the ssh session's shell leads its session, and ``mnexec -d`` run as a
        # session leader forks and lets its parent exit, which would end the session at once.
        argv = [*self.cluster.ssh_argv(self.server, tty=tt), f"{where}env {remote_env} {remote}; exit $?"]
        params["preexec_fn"] = _own_group_then(params.get("preexec_fn"))
        return Node._popen(self, argv, **params)



class ClusterHost(ClusterNode, Host):
    """A Mininet host on another server (cluster.py's RemoteHost)."""


class RemoteDataPlane:
    """A switch target's data plane on another server: ``python -m switches.agent`` there over
    ssh, its control socket forwarded here by ssh (a ``DataPlane``, switches/target.py).

    Its ``pid`` is the ssh connection the agent runs over: it exits when the agent (and with
    it the switch) dies or the connection drops, which is what the run watches. The agent
    stops the switch when that connection closes. The switch's log is copied here when it stops.
    """

    def __init__(self, cluster: Cluster, server: str, target: str, ports: Mapping[int, str], log_dir: Path, *, name: str, k: int,
                 max_pool_size: int, options: Mapping[str, Any]) -> None:
        self.cluster, self.server, self.target, self.name = cluster, server, target, name
        self.ports, self.log_dir, self.k, self.max_pool_size, self.options = dict(ports), log_dir, k, max_pool_size, dict(options)
        self.remote_dir = f"/tmp/switchml-agent-{os.getpid()}-{name}"
        self.local_socket = cluster.control_dir / f"{name}.sock"
        self._agent: subprocess.Popen | None = None
        self._forward: subprocess.Popen | None = None
        self.pid_on_server: int | None = None
        """The switch's process on its server (the agent's 'ready' says it; none for the eBPF switch)."""

    def start(self) -> None:
        server = self.cluster.servers[self.server]
        argv = [server.python, "-m", "switches.agent", "--target", self.target, "--name", self.name, "--socket",
                f"{self.remote_dir}/control.sock", "--log-dir", self.remote_dir, "--k", str(self.k), "--max-pool-size",
                str(self.max_pool_size), *(f"--port={p}={i}" for p, i in sorted(self.ports.items())), "--options", json.dumps(self.options)]
        environment = " ".join(shlex.quote(f"{k}={v}") for k, v in added_environment({}).items())
        command = f"mkdir -p {self.remote_dir} && cd {shlex.quote(server.checkout)} && env {environment} {shlex.join(argv)}; exit $?"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{self.name}.agent.log").open("ab") as output:
            self._agent = subprocess.Popen([*self.cluster.ssh_argv(self.server), command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=output, preexec_fn=_own_group_then(dies_with_this_process()))
        line = self._agent.stdout.readline().split()
        if line[:1] != [b"ready"]:
            self.stop()
            raise ClusterError(f"switch {self.name} on server {self.server} did not start; log {self.log_dir / f'{self.name}.agent.log'}")
        self.pid_on_server = int(line[1]) if line[1:] != [b"-"] else None
        self.local_socket.unlink(missing_ok=True)
        self._forward = subprocess.Popen([*self.cluster.ssh_argv(self.server, multiplexed=False), "-N", "-o", "ExitOnForwardFailure=yes",
                                          "-L", f"{self.local_socket}:{self.remote_dir}/control.sock"], stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         preexec_fn=_own_group_then(dies_with_this_process()))
        deadline = time.monotonic() + FORWARD_TIMEOUT_S
        while True:
            try:
                with SocketControl(self.local_socket, timeout=2.0) as control:
                    control.ping()
                return
            except ControlPlaneError:
                if self._forward.poll() is not None or time.monotonic() > deadline:
                    error = self._forward.stderr.read().decode(errors="replace").strip() if self._forward.poll() is not None else "timed out"
                    self.stop()
                    raise ClusterError(f"switch {self.name} on server {self.server}: its control socket is not reachable: {error}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        """The agent first (it stops its switch when its input closes, within ``AGENT_STOP_S``),
        then the forward (an ``ssh -N`` that only a signal ends)."""
        if self._agent is not None and self._agent.poll() is None:
            self._agent.stdin.close()
            _wait_or_kill(self._agent, AGENT_STOP_S)
        if self._forward is not None and self._forward.poll() is None:
            self._forward.terminate()
            _wait_or_kill(self._forward, AGENT_STOP_S)
        if self._agent is not None:
            try:
                self.cluster.pull(self.server, self.log_dir / f"{self.name}.log", remote=f"{self.remote_dir}/{self.name}.log")
            except ClusterError:
                pass  # a target that writes no log (eBPF), or the server is gone
            self.cluster.run(self.server, f"rm -rf {shlex.quote(self.remote_dir)}")
        self._agent = self._forward = None
        self.local_socket.unlink(missing_ok=True)

    @property
    def running(self) -> bool:
        return self._agent is not None and self._agent.poll() is None

    @property
    def pid(self) -> int | None:
        return self._agent.pid if self.running else None

    def control(self, command_log: Path | None = None) -> SwitchControl:
        return SocketControl(self.local_socket, command_log=command_log)

    def problems(self) -> list[str]:
        """None beyond its process's death, which the run watches (DataPlane.problems)."""
        return []

    @property
    def threads(self) -> Mapping[str, ThreadWatch]:
        """None here: the switch's own threads (bmv2's learning controller) run beside it on
        its server, and the agent exits when one of them ends, which ``pid`` shows."""
        return {}


def _wait_or_kill(process: subprocess.Popen, timeout: float) -> None:
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def cluster_switch_class(node_class: type) -> type:
    """A target's Mininet switch class on another server: its data plane started there."""

    class ClusterSwitch(ClusterNode, node_class):
        def start(self, controllers: list[Any]) -> None:
            self._data_plane = RemoteDataPlane(self.cluster, self.server, self.target.name, self.ports_up(), self.log_dir, name=self.name,
                                               k=self.k, max_pool_size=self.max_pool_size,
                                               options={**self.portable_data_plane_options(), "protocol": self.protocol})
            self._data_plane.start()

        @property
        def switch_pid_on_server(self) -> int | None:
            return None if self._data_plane is None else self._data_plane.pid_on_server

    ClusterSwitch.__name__ = ClusterSwitch.__qualname__ = f"Cluster{node_class.__name__}"
    return ClusterSwitch


def added_environment(env: Mapping[str, str] | None) -> dict[str, str]:
    """What a caller's ``env`` adds to or changes in this process's, and the network holder's
    mark: the part of it that means something on another server."""
    added = {k: v for k, v in (env or {}).items() if os.environ.get(k) != v}
    if HOLDER_ENV in os.environ:
        added[HOLDER_ENV] = os.environ[HOLDER_ENV]
    return added


def run_on_server(node: Node, argv: Sequence[str]) -> None:
    """A command in the root namespace of ``node``'s server, which must succeed."""
    if getattr(node, "isRemote", False):
        done = node.cluster.run(node.server, shlex.join(argv))
        code, out = done.returncode, (done.stdout + done.stderr).decode(errors="replace")
    else:
        result = subprocess.run(list(argv), capture_output=True, text=True)
        code, out = result.returncode, result.stdout + result.stderr
    if code != 0:
        raise ClusterError(f"{node.name}: {' '.join(argv)}: {out.strip()}")


class VxlanLink(RemoteLink):
    """A link between nodes of two servers as a VXLAN pair; within a server, a veth (cluster.py)."""

    def __init__(self, node1: Node, node2: Node, cluster: Cluster, **kwargs: Any) -> None:
        self.cluster = cluster
        super().__init__(node1, node2, **kwargs)

    def makeTunnel(self, node1: Node, node2: Node, intfname1: str, intfname2: str,  # noqa: N802 (Mininet's names)
                   addr1: str | None = None, addr2: str | None = None) -> None:
        """Each end made in its server's root namespace and moved into its node there (a
        host's namespace; a switch's end stays where the switch runs), as cluster.py's ssh
        tunnel does: Mininet's links make their ends in place and move nothing."""
        vni = self.cluster.next_vni()
        server1, server2 = (self.cluster.server_of(n.name) for n in (node1, node2))
        ends = ((node1, intfname1, addr1, server1, server2), (node2, intfname2, addr2, server2, server1))
        for node, name, mac, here, there in ends:
            local, remote = self.cluster.underlay_address(here, there), self.cluster.underlay_address(there, here)
            address = ["address", mac] if mac else []
            run_on_server(node, ["ip", "link", "add", name, *address, "mtu", str(FRAME_MTU), "type", "vxlan", "id", str(vni),
                                 "local", local, "remote", remote, "dstport", str(VXLAN_PORT)])
            if node.inNamespace:
                run_on_server(node, ["ip", "link", "set", name, "netns", str(node.pid)])
        return None


def preflight(cluster: Cluster, switch_target: str, switches: Sequence[str], writes: Sequence[Path] = ()) -> None:
    """Every server: reachable as root over ssh, the same commit checked out (and the same
    uncommitted changes) with its venv,
    the tools on its PATH, an underlay that carries a full VXLAN frame, a file system that
    takes the folders of ``writes`` (the run copies its inputs and specs to the same paths
    there, and its workers write their results beside them); and where one of
    ``switches`` is placed, what ``switch_target`` needs there (its ``detect``, run on that
    server: bmv2's simple_switch and p4c, the eBPF switch's clang, bpftool and kernel).
    The first problem raises ServerUnavailableError, one line naming the server."""
    here = release.commit() if release.is_checkout() else None
    if here is None:
        raise ServerUnavailableError(f"a cluster run needs every server to check out this tree's commit, and {REPO_ROOT} is not a git "
                                     "checkout (an installed testbed is not one): run it from a clone (docs/install.md)")
    commit = here.sha
    hosting = {cluster.server_of(switch) for switch in switches}
    for name, server in cluster.servers.items():
        try:
            _check_server(cluster, name, server, commit, writes)
            if name in hosting:
                _check_switch_target(cluster, name, server, switch_target)
        except ClusterError as exc:
            raise ServerUnavailableError(str(exc)) from None
        except subprocess.TimeoutExpired:
            raise ServerUnavailableError(f"server {name}: not reachable over ssh at {server.user}@{server.address} (timed out)") from None


UNCOMMITTED = "diff HEAD | sha256sum | cut -d' ' -f1"
"""A digest of a checkout's changes to tracked files: the same commit runs the same code only with the same ones."""


WRITABLE_PROBE = ('d={path}; while [ ! -e "$d" ]; do d=$(dirname "$d"); done; '
                  't=$(mktemp -d -p "$d" 2>&1) && rmdir "$t" && echo writable{index}=yes || echo "writable{index}=$d: ${{t##*: }}"')
"""Whether a folder could be made at ``path`` on a server: one is made (and removed) in the
nearest folder of it that exists there; the answer is yes, or that folder and mktemp's reason."""


def _check_server(cluster: Cluster, name: str, server: Server, commit: str, writes: Sequence[Path] = ()) -> None:
    """The checks of ``preflight`` but the switch target's, asked in one command (an ssh round
    trip costs 0.1-0.3 s), each answer on a line of its own."""
    checkout, back = shlex.quote(server.checkout), shlex.quote(cluster.underlay_address(LOCAL, name))
    probe = " ; ".join([
        *(WRITABLE_PROBE.format(path=shlex.quote(str(path)), index=index) for index, path in enumerate(writes)),
        "echo uid=$(id -u)",
        f"echo commit=$(git -C {checkout} rev-parse HEAD 2>/dev/null)",
        f"echo changes=$(git -C {checkout} {UNCOMMITTED} 2>/dev/null)",
        f"echo venv=$(test -x {shlex.quote(server.python)} && echo yes)",
        "echo missing=" + "".join(f"$(command -v {t} >/dev/null || echo ' {t}')" for t in TOOLS),
        f"route=$(ip -o route get {back} 2>/dev/null); echo route=$route",
        "dev=${route##* dev }; echo mtu=$(cat /sys/class/net/${dev%% *}/mtu 2>/dev/null)",
    ])
    answers = dict(line.split("=", 1) for line in cluster.check(
        name, probe, f"not reachable over ssh at {server.user}@{server.address}", timeout=SSH_CONNECT_S + 10).splitlines() if "=" in line)
    if answers["uid"] != "0":
        raise ServerUnavailableError(f"server {name}: {server.user}@{server.address} is not root there (uid {answers['uid']}); the network needs root")
    for index, path in enumerate(writes):
        if answers.get(f"writable{index}") != "yes":
            raise ServerUnavailableError(f"server {name}: cannot write in {answers.get(f'writable{index}', '?')}, where the run keeps "
                                         f"{path}'s files there (its inputs, specs and results); make it writable there")
    if not answers["commit"]:
        raise ServerUnavailableError(f"server {name}: no git checkout at {server.checkout}")
    if answers["commit"] != commit:
        raise ServerUnavailableError(f"server {name}: {server.checkout} is at commit {answers['commit'][:12]}, this checkout at {commit[:12]}; "
                                     "check out the same commit there")
    changes = subprocess.run(["sh", "-c", f"git -C {shlex.quote(str(REPO_ROOT))} {UNCOMMITTED}"], capture_output=True, text=True,
                             check=True).stdout.strip()
    if answers["changes"] != changes:
        raise ServerUnavailableError(f"server {name}: {server.checkout} has other uncommitted changes than this checkout "
                                     "(git diff HEAD); commit them here and check out that commit there")
    if answers["venv"] != "yes":
        raise ServerUnavailableError(f"server {name}: no venv at {server.checkout}/.venv (run scripts/bootstrap.sh there)")
    if answers["missing"].split():
        raise ServerUnavailableError(f"server {name}: lacks {', '.join(answers['missing'].split())} (scripts/bootstrap.sh installs them)")
    if not answers["route"] or not answers["mtu"]:
        raise ServerUnavailableError(f"server {name}: no route back here ({cluster.underlay_address(LOCAL, name)})")
    theirs_mtu = int(answers["mtu"])
    ours = _device(subprocess.run(["ip", "-o", "route", "get", server.address], capture_output=True, text=True, check=True).stdout)
    ours_mtu = int(Path(f"/sys/class/net/{ours}/mtu").read_text())
    for where, device, mtu in ((f"server {name}", _device(answers["route"]), theirs_mtu), ("this machine", ours, ours_mtu)):
        if mtu < FRAME_MTU + VXLAN_OVERHEAD:
            raise ServerUnavailableError(f"server {name}: {device} on {where} has MTU {mtu}; a VXLAN link needs "
                                         f"{FRAME_MTU + VXLAN_OVERHEAD} on the path between the servers (ip link set dev {device} mtu 1550)")


DETECT_TARGET = "import sys; from switches.targets import lookup; print('; '.join(lookup(sys.argv[1]).detect()))"
"""Run on a server with a target's name: what that server lacks for it (empty when nothing)."""


def _check_switch_target(cluster: Cluster, name: str, server: Server, target: str) -> None:
    command = f"cd {shlex.quote(server.checkout)} && {shlex.quote(server.python)} -c {shlex.quote(DETECT_TARGET)} {shlex.quote(target)}"
    lacks = cluster.check(name, command, f"checking what the {target} switch needs there").strip()
    if lacks:
        raise ServerUnavailableError(f"server {name}: cannot run the {target} switch placed there: it lacks {lacks}")


def _device(route: str) -> str:
    """The device of an ``ip -o route get`` answer."""
    words = route.split()
    return words[words.index("dev") + 1]
