"""Start, wait for and stop one simple_switch process and its L2 learning controller.

Kept apart from the Mininet node so that tests (and anything without Mininet) can run a
real bmv2 with the same command line, readiness check, learning and shutdown as the testbed.
"""

from __future__ import annotations

import logging
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable, Mapping, Protocol

if TYPE_CHECKING:
    from switches.bmv2.control import Bmv2Control

from base.lifetime import ThreadWatch, dies_with_this_process
from base.plugin import resolve
from switches.bmv2 import program_for
from switches.bmv2.compile import CompileOptions, P4Program, compile_p4
from switches.target import DataPlaneStartError

log = logging.getLogger(__name__)


class DigestController(Protocol):
    """What the process needs of its program's digest controller (``P4Program.controller``)."""

    watch: ThreadWatch

    def start(self) -> None: ...

    def stop(self) -> None: ...

THRIFT_HOST = "127.0.0.1"
NOTIFICATIONS_DIR = Path("/tmp")
"""Where each simple_switch's nanomsg notification socket (learning digests) lives.

bmv2's default, ipc:///tmp/bmv2-<device id>-notifications.ipc, collides when two switches
on one machine share a device id (two testbeds, or a test while a run is going); the path
here is named after the instance's Thrift port, which is unique among running switches."""
START_TIMEOUT_S = 30.0
"""simple_switch loads the JSON and opens Thrift in well under a second; on a loaded
2-core machine it can take a few seconds. Beyond this it is not coming up."""
STOP_TIMEOUT_S = 5.0

Popen = Callable[..., subprocess.Popen]

THRIFT_PORT_BASE = 9090
"""simple_switch's usual Thrift port; switch number i prefers 9090 + i."""



class Bmv2StartError(DataPlaneStartError):
    """simple_switch exited or did not answer on its Thrift port; carries its log's tail."""


def thrift_answers(port: int, host: str = THRIFT_HOST) -> bool:
    """True if something accepts TCP connections on the Thrift port."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def free_tcp_port(preferred: int) -> int:
    """``preferred`` if nothing listens there, else a port the kernel picks as free.

    Predictable ports (9090 + device id) suit a student typing simple_switch_CLI in a
    Mininet network (switches/bmv2/node.py); the fallback keeps concurrent runs on one
    machine from taking each other's switch.
    """
    if not thrift_answers(preferred):
        return preferred
    return kernel_tcp_port()


def kernel_tcp_port() -> int:
    """A port the kernel picks as free: a standalone switch's (tests, benchmarks, a cluster's
    agent). Two of them starting at once would both find 9090 free, and the second would
    take the first's Thrift server for its own; the kernel's choice leaves no such window."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((THRIFT_HOST, 0))
        return s.getsockname()[1]


@dataclass
class Bmv2Process:
    """One simple_switch running a compiled program on a set of interfaces."""

    name: str
    json_path: Path
    interfaces: Mapping[int, str]
    """bmv2 port number -> Linux interface name (``-i port@intf``)."""
    thrift_port: int
    device_id: int
    log_dir: Path
    log_level: str = "warn"
    """bmv2 logs every table hit at 'trace'/'debug'; that costs throughput, so runs log
    warnings only and a debugging session raises it."""
    executable: str = "simple_switch"
    popen: Popen = subprocess.Popen
    """How to launch; a Mininet node passes its own popen to run inside its namespace."""
    program: P4Program = field(default_factory=program_for)
    """The program ``json_path`` was built from: its digests' controller runs with the switch."""
    learning: bool = True
    """Answer the program's digests (``P4Program.controller``: SwitchML's L2 learning); off only
    for stand-ins of simple_switch that have no notification socket."""
    _process: subprocess.Popen | None = field(default=None, init=False, repr=False)
    _learner: "DigestController | None" = field(default=None, init=False, repr=False)
    _log_file: IO[bytes] | None = field(default=None, init=False, repr=False)

    @classmethod
    def for_ports(
        cls,
        ports: Mapping[int, str],
        log_dir: Path,
        *,
        name: str,
        k: int,
        max_pool_size: int,
        json_path: Path | None = None,
        protocol: str | None = None,
        device_id: int = 0,
        thrift_port: int | None = None,
        port_rate_bps: float | None = None,
        port_queue_packets: int | None = None,
        **options: Any,
    ) -> "Bmv2Process":
        """simple_switch on ``ports``: ``json_path`` runs a prebuilt program (built for its own
        k and pool size), else ``protocol``'s program (switches/bmv2/__init__.py, ``program_for``) compiled for
        ``k`` and ``max_pool_size`` (cached by compile.py);
        the Thrift port is one the kernel picks unless given (kernel_tcp_port; a Mininet
        network's switches are given 9090 + device id). ``port_rate_bps`` and ``port_queue_packets``,
        the ports' link rate and queue limit, are for a program whose process paces its ports
        (``P4Program.process``: ATP's); this one leaves bmv2's default queues."""
        program = program_for(protocol)
        return cls(
            name=name,
            json_path=json_path if json_path is not None else compile_p4(CompileOptions(program=program, max_pool_size=max_pool_size, k=k)),
            program=program,
            interfaces=ports,
            thrift_port=kernel_tcp_port() if thrift_port is None else thrift_port,
            device_id=device_id,
            log_dir=log_dir,
            **options,
        )

    @property
    def notifications_path(self) -> Path:
        return NOTIFICATIONS_DIR / f"switchml-bmv2-{self.thrift_port}-notifications.ipc"

    @property
    def notifications_addr(self) -> str:
        """The nanomsg address simple_switch publishes learning digests on."""
        return f"ipc://{self.notifications_path}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.simple_switch.log"

    def command(self) -> list[str]:
        """The simple_switch command line (logged, so a run can be reproduced by hand)."""
        interface_args = [arg for port, intf in sorted(self.interfaces.items()) for arg in ("-i", f"{port}@{intf}")]
        return [
            self.executable,
            *interface_args,
            "--thrift-port", str(self.thrift_port),
            "--device-id", str(self.device_id),
            "--notifications-addr", self.notifications_addr,
            "--log-console",
            "--log-level", self.log_level,
            str(self.json_path),
        ]  # fmt: skip

    def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Launch simple_switch and return once its Thrift server answers."""
        if self._process is not None:
            raise RuntimeError(f"{self.name}: simple_switch already started")
        if thrift_answers(self.thrift_port):
            raise Bmv2StartError(f"{self.name}: Thrift port {self.thrift_port} is already in use")
        self.log_dir.mkdir(parents=True, exist_ok=True)
        command = self.command()
        log.info("%s: %s (log: %s)", self.name, " ".join(command), self.log_path)
        self._log_file = self.log_path.open("ab")
        self._process = self.popen(command, stdin=subprocess.DEVNULL, stdout=self._log_file, stderr=subprocess.STDOUT,
                                   preexec_fn=dies_with_this_process())  # dies with the runner (base.lifetime)
        deadline = time.monotonic() + timeout_s
        while not thrift_answers(self.thrift_port):
            if self._process.poll() is not None:
                code = self._process.returncode
                self._release()
                raise Bmv2StartError(f"{self.name}: simple_switch exited with {code}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise Bmv2StartError(
                    f"{self.name}: no answer on Thrift port {self.thrift_port} after {timeout_s:.0f} s:\n{self.log_tail()}"
                )
            time.sleep(0.1)
        log.info("%s: simple_switch pid %d ready, Thrift port %d", self.name, self._process.pid, self.thrift_port)
        if self.learning and self.program.controller is not None:
            try:
                self._learner = resolve(self.program.controller)(self.name, self.notifications_addr, self.thrift_port, self.json_path)
            except BaseException:
                self.stop()
                raise
            self._learner.start()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """Terminate simple_switch, killing it if it has not exited within ``timeout_s``."""
        if self._process is None:
            return
        if self._learner is not None:
            self._learner.stop()
            self._learner = None
        if self._process.poll() is None:
            self._process.terminate()
            self._process.send_signal(signal.SIGCONT)  # a stopped switch acts on SIGTERM only once continued
            try:
                self._process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                log.warning("%s: simple_switch did not exit within %.0f s; killing it", self.name, timeout_s)
                self._process.kill()
                self._process.wait()
        log.info("%s: simple_switch stopped (exit %s)", self.name, self._process.returncode)
        self._release()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """simple_switch's pid while it runs (the runner samples its CPU time)."""
        return self._process.pid if self.running else None

    def problems(self) -> list[str]:
        """None beyond its process's death, which the run watches (DataPlane.problems)."""
        return []

    @property
    def threads(self) -> dict[str, ThreadWatch]:
        """The learning controller's thread while it runs: without it, bmv2 floods every
        unicast frame of ordinary traffic, so a run depends on it as on simple_switch."""
        return {} if self._learner is None else {f"the L2 learning controller of switch {self.name}": self._learner.watch}

    def control_class(self) -> type["Bmv2Control"]:
        """The control plane of the program this switch runs: a protocol whose program needs
        more (ATP's egress queues) runs a subclass of Bmv2Process that names its own."""
        from switches.bmv2.control import Bmv2Control

        return Bmv2Control

    def control(self, command_log: Path | None = None) -> "Bmv2Control":
        """A Thrift connection to this switch (the caller closes it); refused unless
        simple_switch still runs once connected (it can exit right after answering)."""
        if not self.running:
            raise RuntimeError(f"{self.name}: simple_switch is not running (start the network first)")
        control = self.control_class()(self.thrift_port, json_path=self.json_path, command_log=command_log)
        if not self.running:
            control.close()
            raise Bmv2StartError(f"{self.name}: simple_switch exited right after starting:\n{self.log_tail()}")
        return control

    def log_tail(self, lines: int = 30) -> str:
        """The last lines of the switch's log, for error messages."""
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def _release(self) -> None:
        self._process = None
        self.notifications_path.unlink(missing_ok=True)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
