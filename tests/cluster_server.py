"""A second "server" on this machine, for the cluster tests and CI: as separate as a
namespace can make it.

    .venv/bin/python -m tests.cluster_server up      # (re)create it; prints its ssh_config
    .venv/bin/python -m tests.cluster_server sync    # its checkout to this checkout's commit and changes
    .venv/bin/python -m tests.cluster_server down    # remove it and whatever it left

The server is one process tree in its own network, mount, UTS and PID namespaces, with its
own sshd as PID 1 (so killing it kills everything the server ran, and nothing of it can
outlive it). It is reached from the root namespace over one veth (``ROOT_IFNAME``
``ROOT_ADDRESS`` <-> the server's ``eth0`` ``SERVER_ADDRESS``). In its mount namespace it
gets what a real server has and no more: a private /tmp and /run (no socket, lock file or
pid file of this machine's is reachable by path), its own sysfs and bpffs (no BPF pin of
this machine's), its own hostname, and its own copy of the checkout at ``REMOTE_CHECKOUT``
-- a git clone of the current commit, with a hard-linked copy of this checkout's .venv
stripped of the editable install that points back here -- while the controlling checkout
is hidden under an empty tmpfs. A call that works against it therefore works over ssh or
not at all.

Everything it creates lives under ``STATE_DIR``, the netns ``NETNS`` and the veth; ``up``
removes a previous instance first (also one whose creator was killed), and ``down``
removes all of it. The netns is entered with ``nsenter --net``, not ``ip netns exec``,
which would remount /sys over ours. The ssh key and host key are generated per instance
and thrown away with it.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from protocol.params import REPO_ROOT

log = logging.getLogger("tests.cluster_server")

NAME = "srv2"
"""Its hostname, and its name in the cluster config and the ssh_config."""
NETNS = "sml-srv2"
ROOT_IFNAME = "smlsrv2"
ROOT_ADDRESS = "10.233.0.1"
SERVER_ADDRESS = "10.233.0.2"
PREFIX_LEN = 24
UNDERLAY_MTU = 9000
"""A jumbo-frame link between the servers: a VXLAN link's full 1500-byte frames fit with 50 bytes to spare."""
STATE_DIR = Path("/var/tmp/switchml-cluster") / NAME
"""On the same file system as the checkout's .venv, so that the venv copy is hard links."""
REMOTE_CHECKOUT = Path("/srv/switchml")
"""Where the server's own checkout is, seen from inside it (it exists nowhere else)."""
READY_TIMEOUT_S = 20.0
SSHD = "/usr/sbin/sshd"


class ServerError(RuntimeError):
    """The server could not be created (a tool missing, a command failing)."""


@dataclass(frozen=True)
class Server:
    """A running second server: how to reach it."""

    name: str
    address: str
    ssh_config: Path
    """An ssh_config naming the server (``ssh -F ssh_config srv2``): its address, key, host key."""
    checkout: Path
    pid: int
    """The namespaces' first process (unshare) in this machine's PID namespace."""

    def ssh(self, command: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """One command on the server, as root, over ssh."""
        return subprocess.run(["ssh", "-F", str(self.ssh_config), self.name, command], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)


def missing() -> list[str]:
    """What this machine lacks for the server (empty when it can have one)."""
    problems = []
    if os.geteuid() != 0:
        problems.append("root (namespaces)")
    for tool in ("ssh", "ssh-keygen", "unshare", "nsenter", "git"):
        if shutil.which(tool) is None:
            problems.append(tool)
    if not Path(SSHD).exists():
        problems.append(f"{SSHD} (openssh-server: scripts/bootstrap.sh --cluster installs it)")
    if not (REPO_ROOT / ".venv" / "bin" / "python").exists():
        problems.append(f"{REPO_ROOT}/.venv (scripts/bootstrap.sh)")
    return problems


def _run(*argv: str, **kwargs) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise ServerError(f"{' '.join(argv)}: {(result.stderr or result.stdout).strip()}")
    return result.stdout


def _pid_file() -> Path:
    return STATE_DIR / "server.pid"


def down() -> list[str]:
    """Remove the server and everything it made, whoever started it; what was removed."""
    removed = []
    pid_file = _pid_file()
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, signal.SIGKILL)  # unshare --kill-child takes the server's PID 1, and with it its namespace
            removed.append(f"process {pid}")
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    if subprocess.run(["ip", "link", "show", ROOT_IFNAME], capture_output=True).returncode == 0:
        subprocess.run(["ip", "link", "delete", ROOT_IFNAME], capture_output=True)
        removed.append(f"interface {ROOT_IFNAME}")
    if (Path("/run/netns") / NETNS).exists():
        subprocess.run(["ip", "netns", "delete", NETNS], capture_output=True)
        removed.append(f"netns {NETNS}")
    if STATE_DIR.exists():
        shutil.rmtree(STATE_DIR, ignore_errors=True)
        removed.append(f"folder {STATE_DIR}")
    return removed


def _checkout(into: Path) -> None:
    """A clone of this checkout's current commit, with a copy of its venv that imports the clone."""
    commit = _run("git", "-C", str(REPO_ROOT), "rev-parse", "HEAD").strip()
    _run("git", "clone", "-q", "--no-checkout", str(REPO_ROOT), str(into))
    _run("git", "-C", str(into), "checkout", "-q", "--detach", commit)
    _apply_uncommitted(into)
    _run("cp", "-al", str(REPO_ROOT / ".venv"), str(into / ".venv"))
    for site in (into / ".venv" / "lib").glob("python*/site-packages"):
        for hook in site.glob("__editable__*"):  # the editable install points at this checkout
            hook.unlink()


def _keys(ssh_dir: Path) -> None:
    ssh_dir.mkdir(mode=0o700)
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "switchml-cluster-test", "-f", str(ssh_dir / "id_ed25519"))
    _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{NAME}-host", "-f", str(ssh_dir / "host_ed25519"))
    host_key = (ssh_dir / "host_ed25519.pub").read_text().split()
    (ssh_dir / "known_hosts").write_text(f"{SERVER_ADDRESS} {host_key[0]} {host_key[1]}\n")
    shutil.copy(ssh_dir / "id_ed25519.pub", ssh_dir / "authorized_keys")


def _sshd_config(server_ssh: Path) -> str:
    """sshd's config as the server sees its files (``server_ssh`` inside its mount namespace)."""
    return "\n".join([
        f"ListenAddress {SERVER_ADDRESS}",
        f"HostKey {server_ssh}/host_ed25519",
        f"AuthorizedKeysFile {server_ssh}/authorized_keys",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "UseDNS no",
        "StrictModes no",
        "PidFile none",
        "MaxSessions 100",
        "MaxStartups 100:30:200",
        "LogLevel ERROR",
        *login_environment(),
        "",
    ])


INSTALLED_SOFTWARE_ENVIRONMENT = ("PATH", "PYTHONPATH", "P4C_16_INCLUDE_PATH")
"""Variables by which this process finds software installed outside the system's default
paths (the prebuilt P4 toolchain's env.sh sets them)."""


def installed_under_tmp() -> list[str]:
    """The software INSTALLED_SOFTWARE_ENVIRONMENT finds under /tmp, which the server's
    private /tmp would hide (CI's clone, with the P4 toolchain beside it, may be there): per
    directory named, its outermost folder that holds nothing of this checkout (a toolchain's
    bin/ needs its lib/ and share/ too). The server gets them back at the same paths."""
    def under(path: Path, root: Path) -> bool:
        return path == root or root in path.parents

    tmp, kept = Path("/tmp"), set()
    for name in INSTALLED_SOFTWARE_ENVIRONMENT:
        for entry in filter(None, os.environ.get(name, "").split(":")):
            folder = Path(entry).resolve()
            if not folder.is_dir() or not under(folder, tmp) or folder == tmp or under(folder, REPO_ROOT):
                continue
            while folder.parent != tmp and not under(REPO_ROOT, folder.parent):
                folder = folder.parent
            kept.add(folder)
    return sorted(str(f) for f in kept if not any(other in f.parents for other in kept))


def login_environment() -> list[str]:
    """sshd's ``SetEnv`` of INSTALLED_SOFTWARE_ENVIRONMENT as this process has them: the
    server sees this machine's file system but for the checkout, so the software installed
    here (bmv2, p4c) is installed there too, and a session there finds it as a real server's
    login profile would let it."""
    values = [f"{name}={os.environ[name]}" for name in INSTALLED_SOFTWARE_ENVIRONMENT if os.environ.get(name)]
    return [f"SetEnv {shlex.join(values)}"] if values else []


def _ssh_config(ssh_dir: Path) -> str:
    """The client's config: the server by name, with this instance's key and host key."""
    return "\n".join([
        f"Host {NAME} {SERVER_ADDRESS}",
        f"  HostName {SERVER_ADDRESS}",
        "  User root",
        f"  IdentityFile {ssh_dir}/id_ed25519",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {ssh_dir}/known_hosts",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  ConnectTimeout 5",
        "  ServerAliveInterval 2",
        "  ServerAliveCountMax 3",
        "",
    ])


def _namespace_script(state: Path) -> str:
    """What runs as the server's PID 1 before it becomes sshd: its own file system view."""
    server_ssh = Path("/run/ssh")
    hidden = sorted({str(REPO_ROOT), str(state.parent)})
    kept = {path: state / "kept" / str(i) for i, path in enumerate(installed_under_tmp())}
    steps = [
        "set -e",
        f"hostname {NAME}",
        "mount --make-rprivate /",
        "mount -t sysfs sysfs /sys",
        "mount -t bpf bpf /sys/fs/bpf",
        # what the private /tmp would hide of the installed software: held aside, then moved back
        *(f"mkdir -p {aside} && mount --bind {shlex.quote(path)} {aside}" for path, aside in kept.items()),
        "mount -t tmpfs tmpfs /tmp",
        *(f"mkdir -p {shlex.quote(path)} && mount --move {aside} {shlex.quote(path)}" for path, aside in kept.items()),
        f"mkdir -p {REMOTE_CHECKOUT.parent}",
        f"mount -t tmpfs tmpfs {REMOTE_CHECKOUT.parent}",
        f"mkdir {REMOTE_CHECKOUT}",
        f"mount --bind {state / 'checkout'} {REMOTE_CHECKOUT}",
        "mount -t tmpfs tmpfs /run",
        f"mkdir -p /run/sshd /run/lock /run/netns {server_ssh}",
        f"cp -a {state / 'ssh-server'}/. {server_ssh}/",
        *(f"if [ -d {shlex.quote(path)} ]; then mount -t tmpfs tmpfs {shlex.quote(path)}; fi" for path in hidden),  # under /tmp: hidden already
        "ip link set lo up",
        f"exec {SSHD} -D -e -f {server_ssh}/sshd_config",
    ]
    return "\n".join(steps)


def up() -> Server:
    """(Re)create the server; returns once its sshd answers."""
    problems = missing()
    if problems:
        raise ServerError(f"a second server needs {', '.join(problems)}")
    removed = down()
    if removed:
        log.warning("removed an earlier second server: %s", ", ".join(removed))
    STATE_DIR.mkdir(parents=True)
    try:
        return _create()
    except BaseException:
        down()
        raise


def _create() -> Server:
    ssh_dir = STATE_DIR / "ssh"
    _keys(ssh_dir)
    server_ssh = STATE_DIR / "ssh-server"
    server_ssh.mkdir(mode=0o700)
    for key in ("host_ed25519", "authorized_keys"):
        shutil.copy(ssh_dir / key, server_ssh / key)
    (server_ssh / "sshd_config").write_text(_sshd_config(Path("/run/ssh")))
    ssh_config = STATE_DIR / "ssh_config"
    ssh_config.write_text(_ssh_config(ssh_dir))
    _checkout(STATE_DIR / "checkout")
    _run("ip", "netns", "add", NETNS)
    _run("ip", "link", "add", ROOT_IFNAME, "type", "veth", "peer", "name", "eth0", "netns", NETNS)
    _run("ip", "addr", "add", f"{ROOT_ADDRESS}/{PREFIX_LEN}", "dev", ROOT_IFNAME)
    _run("ip", "link", "set", ROOT_IFNAME, "mtu", str(UNDERLAY_MTU), "up")
    in_netns = ["nsenter", f"--net=/run/netns/{NETNS}"]
    _run(*in_netns, "ip", "addr", "add", f"{SERVER_ADDRESS}/{PREFIX_LEN}", "dev", "eth0")
    _run(*in_netns, "ip", "link", "set", "eth0", "mtu", str(UNDERLAY_MTU), "up")
    script = STATE_DIR / "namespace.sh"
    script.write_text(_namespace_script(STATE_DIR))
    with (STATE_DIR / "server.log").open("ab") as output:
        # its own session: a Ctrl-C meant for the tests must not reach the server's sshd
        process = subprocess.Popen([*in_netns, "unshare", "--mount", "--uts", "--pid", "--fork", "--kill-child", "--mount-proc",
                                    "sh", str(script)], stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    _pid_file().write_text(str(process.pid))
    server = Server(NAME, SERVER_ADDRESS, ssh_config, REMOTE_CHECKOUT, process.pid)
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if process.poll() is not None:
            raise ServerError(f"the second server exited with {process.returncode}: {(STATE_DIR / 'server.log').read_text().strip()}")
        answer = server.ssh("hostname", timeout=10)
        if answer.returncode == 0 and answer.stdout.strip() == NAME:
            return server
        if time.monotonic() > deadline:
            raise ServerError(f"the second server's sshd did not answer within {READY_TIMEOUT_S:g} s: {answer.stderr.strip()}")
        time.sleep(0.2)


def _apply_uncommitted(checkout: Path) -> None:
    """This checkout's uncommitted changes to tracked files, made in ``checkout`` too (a run's
    preflight refuses a server whose changes differ: network/cluster.py)."""
    changes = subprocess.run(["git", "-C", str(REPO_ROOT), "diff", "HEAD", "--binary"], capture_output=True, check=True).stdout
    if changes:
        subprocess.run(["git", "-C", str(checkout), "apply", "--whitespace=nowarn"], input=changes, capture_output=True, check=True)


def sync() -> None:
    """The server's checkout at this checkout's current commit, with the same uncommitted changes."""
    checkout = STATE_DIR / "checkout"
    _run("git", "-C", str(checkout), "fetch", "-q", str(REPO_ROOT), "HEAD")
    _run("git", "-C", str(checkout), "checkout", "-q", "--force", "--detach", "FETCH_HEAD")
    _apply_uncommitted(checkout)


def running() -> Server | None:
    """The server ``up`` left running (CI starts it before the tests), if it answers."""
    pid_file = _pid_file()
    if not pid_file.exists():
        return None
    pid = int(pid_file.read_text())
    if not Path(f"/proc/{pid}").exists():
        return None
    server = Server(NAME, SERVER_ADDRESS, STATE_DIR / "ssh_config", REMOTE_CHECKOUT, pid)
    answer = server.ssh("hostname", timeout=10)
    return server if answer.returncode == 0 and answer.stdout.strip() == NAME else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster_server", description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=("up", "sync", "down"))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    try:
        if args.action == "up":
            server = up()
            log.info("second server %s at %s (pid %d); ssh -F %s %s", server.name, server.address, server.pid, server.ssh_config, server.name)
        elif args.action == "sync":
            sync()
        else:
            removed = down()
            log.info("removed %s", ", ".join(removed) if removed else "nothing (no second server)")
    except ServerError as exc:
        log.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
