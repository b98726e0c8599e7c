"""Start and stop an embedded switch process; the one launcher for Mininet, tests and benchmarks.

The process runs one protocol's program class (``program``, a "module:attribute" from the
target's ``PROGRAMS``; SwitchML's pipeline by default); another program means another process.

The control socket lives in a fresh short directory under /tmp because a Unix socket path
may not exceed 107 bytes (log directories from pytest easily do). Start-up waits until the
switch answers ``ping`` on its control socket, bounded, and a switch that died is reported
with the tail of its log rather than a timeout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator, Mapping

from base.lifetime import ThreadWatch, dies_with_this_process
from protocol import params
from switches.control import ControlPlaneError
from switches.embedded import TARGET
from switches.remote_control import SocketControl
from switches.target import DataPlaneStartError

log = logging.getLogger(__name__)

SOCKET_DIR_PREFIX = "sml-"
"""The switch's control-socket folder in the temporary directory: ``sml-<name>-XXXX``."""


def remove_stale_socket_dirs() -> list[str]:
    """Control-socket folders of switches that are gone (their socket refuses connections),
    removed: what a killed run left (network/cleanup.py asks every target). A folder without
    a socket may belong to a switch still starting, and is left alone."""
    removed = []
    for directory in Path(tempfile.gettempdir()).glob(f"{SOCKET_DIR_PREFIX}*"):
        path = directory / "control.sock"
        if not path.is_socket():
            continue
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(str(path))
            except ConnectionRefusedError:
                shutil.rmtree(directory, ignore_errors=True)
                removed.append(f"folder {directory}")
    return removed

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0
LOG_TAIL_LINES = 30


class SwitchStartError(DataPlaneStartError):
    """The switch process exited or never answered on its control socket."""


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log at {path}: {exc})"


class EmbeddedSwitchProcess:
    """One ``python -m switches.embedded`` process owning the given interfaces."""

    def __init__(
        self,
        ports: Mapping[int, str],
        log_dir: Path,
        *,
        k: int,
        program: str | None = None,
        name: str = "switch",
        max_pool_size: int,
        seed: int | None = None,
        log_level: str = "INFO",
        profile: Path | None = None,
        link_delay_ms: float = 0.0,
        scratch_dir: Path | None = None,
    ) -> None:
        self.ports = dict(ports)
        self.name = name
        self.log_file = Path(log_dir) / f"{name}.log"
        self.k = k
        self.program = TARGET.program_of(None) if program is None else program
        """"module:attribute" of the protocol's program class the process runs (None: the target's default)."""
        self.max_pool_size = max_pool_size
        self.seed = seed
        self.link_delay_ms = link_delay_ms
        self.log_level = log_level
        self.profile = profile
        """Run under cProfile and write its stats here when the switch stops."""
        self.scratch_dir = scratch_dir
        """Where the control socket's folder is made (None: the system's temporary folder)."""
        self._socket_dir: Path | None = None
        self._process: subprocess.Popen | None = None

    @property
    def control_socket(self) -> Path:
        if self._socket_dir is None:
            raise RuntimeError(f"switch {self.name} is not started")
        return self._socket_dir / "control.sock"

    def command(self) -> list[str]:
        profiler = [] if self.profile is None else ["-m", "cProfile", "-o", str(self.profile)]
        argv = [sys.executable, *profiler, "-m", "switches.embedded", "--program", self.program, "--control-socket", str(self.control_socket)]
        argv += [f"--port={port}={ifname}" for port, ifname in sorted(self.ports.items())]
        argv += ["--log-file", str(self.log_file), "--log-level", self.log_level]
        argv += ["--k", str(self.k), "--max-pool-size", str(self.max_pool_size)]
        if self.seed is not None:
            argv += ["--seed", str(self.seed)]
        if self.link_delay_ms:
            argv += ["--link-delay-ms", str(self.link_delay_ms)]
        return argv

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._socket_dir = Path(tempfile.mkdtemp(prefix=f"{SOCKET_DIR_PREFIX}{self.name}-", dir=self.scratch_dir))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(params.REPO_ROOT), os.environ.get("PYTHONPATH")])))
        with self.log_file.open("ab") as output:
            # dies with the runner (base.lifetime): an orphaned switch would hold its ports
            self._process = subprocess.Popen(self.command(), cwd=params.REPO_ROOT, env=env, stdout=output, stderr=subprocess.STDOUT,
                                             preexec_fn=dies_with_this_process())
        log.info("started switch %s (pid %d) on %s", self.name, self._process.pid, self.ports)
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise SwitchStartError(
                    f"switch {self.name} exited with {self._process.returncode}; log {self.log_file}:\n{log_tail(self.log_file)}"
                )
            if self.control_socket.exists():
                try:
                    with SocketControl(self.control_socket, timeout=1.0) as control:
                        control.ping()
                    return
                except ControlPlaneError:
                    pass
            if time.monotonic() > deadline:
                raise SwitchStartError(
                    f"switch {self.name} did not answer on {self.control_socket} within {timeout:.0f} s; "
                    f"log {self.log_file}:\n{log_tail(self.log_file)}"
                )
            time.sleep(0.02)

    def control(self, command_log: Path | None = None) -> SocketControl:
        return SocketControl(self.control_socket, command_log=command_log)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM, then SIGKILL after ``timeout``; removes the control socket."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.send_signal(signal.SIGCONT)  # a stopped switch acts on SIGTERM only once continued
            try:
                self._process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("switch %s ignored SIGTERM, killing it", self.name)
                self._process.kill()
                self._process.wait()
        self._process = None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    @property
    def pid(self) -> int | None:
        """The switch process while it runs (None when stopped), for CPU accounting."""
        return self._process.pid if self.running else None

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def problems(self) -> list[str]:
        """None beyond its process's death, which the run watches (DataPlane.problems)."""
        return []

    @property
    def threads(self) -> dict[str, ThreadWatch]:
        """No thread: all of the switch is its process."""
        return {}


@contextlib.contextmanager
def embedded_switch(ports: Mapping[int, str], log_dir: Path, command_log: Path | None = None, **options) -> Iterator[SocketControl]:
    """A running switch on ``ports`` (number -> interface name) and a control connection to it."""
    process = EmbeddedSwitchProcess(ports, log_dir, **options)
    process.start()
    try:
        with process.control(command_log) as control:
            yield control
    finally:
        process.stop()
