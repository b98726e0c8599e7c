"""Load the eBPF switch onto its ports and take it off again, leaving nothing behind.

Start: compile (cached), ``bpftool prog loadall`` the object (one program, one set of
maps) into a per-instance directory of the BPF filesystem, wire port numbers to
interfaces in the maps, and attach the pinned program with iproute2's ``tc`` to the
ingress of every port (a clsact qdisc, direct-action). Then the pins are removed at
once: from here on the program is held by its tc filters and the maps by the program,
and the control plane opens the maps by id. So the switch lives exactly as long as its
filters, and nothing stays pinned.

Stop: delete the filter (and the clsact qdisc, if this switch added it) on every port
that still exists. If the Python process is killed instead, the filters stay until their
ports are deleted (the testbed deletes its veths, Mininet its links), and the kernel frees
the program and maps with the last filter. A kill between loading and unpinning (a few
hundred milliseconds) would leave a pin directory: its name starts with the owner's pid,
and the next start removes every directory whose owner is gone.

The pins are root's alone: the BPF filesystem this module mounts has mode 0700 (the
kernel's default, 1777, lets every user of the machine leave files there, which outlive
every process until a reboot), the pin directories are 0700 and bpftool pins 0600.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Mapping

from base.lifetime import ThreadWatch
from protocol.switchml import params
from switches.ebpf.switchml import maps
from switches.ebpf.bpf import BpfMap, bind_map, open_pinned
from switches.ebpf.switchml.compile import CompileOptions, compile_program
from switches.ebpf.switchml.control import EbpfControl
from switches.ebpf.stats import attached_program_id
from switches.target import DataPlaneStartError

log = logging.getLogger(__name__)

BPFFS = Path("/sys/fs/bpf")
PIN_ROOT = BPFFS / "switchml"
PRIVATE = 0o700
"""The mode of the BPF filesystem this module mounts and of its pin directories."""
PROGRAM = "switchml_ingress"
"""The program's function name in switchml.bpf.c (bpftool pins it under that name)."""
FILTER_PREF = 1
"""Preference (priority) of the switch's filter on each port's ingress hook."""

_instances = itertools.count()


class EbpfStartError(DataPlaneStartError):
    """The kernel, bpftool or tc refused the switch; the message carries their words."""


def run(command: list[str]) -> subprocess.CompletedProcess:
    """Run a tool; EbpfStartError with its output if it fails."""
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise EbpfStartError(f"{' '.join(command)} failed (exit {result.returncode}):\n{result.stdout}{result.stderr}".rstrip())
    return result


def ensure_bpffs(at: Path = BPFFS) -> None:
    """Mount the BPF filesystem at ``at`` if nothing is mounted there (as tc would), root's
    alone (mode PRIVATE); say so once if the one mounted there is writable by every user."""
    mounted = any(line.split()[1:3] == [str(at), "bpf"] for line in Path("/proc/mounts").read_text().splitlines())
    if not mounted:
        log.info("mounting the BPF filesystem at %s", at)
        run(["mount", "-t", "bpf", "-o", f"mode={PRIVATE:o}", "bpf", str(at)])
    elif at.stat().st_mode & 0o002:
        _world_writable(at)


@functools.cache
def _world_writable(at: Path) -> None:
    log.warning("the BPF filesystem at %s is writable by every user (mode %o): any process of this machine can leave"
                " files there that outlive it (`chmod %o %s` closes that); the switch's pins stay in %s, mode %o",
                at, at.stat().st_mode & 0o7777, PRIVATE, at, PIN_ROOT, PRIVATE)  # fmt: skip


def make_pin_dir(name: str) -> Path:
    """A new directory for one instance's pins, in PIN_ROOT, both root's alone."""
    PIN_ROOT.mkdir(mode=PRIVATE, exist_ok=True)
    PIN_ROOT.chmod(PRIVATE)  # made by an older version, or by hand
    pin_dir = PIN_ROOT / name
    pin_dir.mkdir(mode=PRIVATE)
    return pin_dir


def remove_orphaned_pins() -> list[Path]:
    """Remove pin directories whose owner process is gone (killed while loading); which."""
    if not PIN_ROOT.is_dir():
        return []
    owners = {directory: directory.name.split("-", 1)[0] for directory in PIN_ROOT.iterdir()}
    orphans = [directory for directory, pid in owners.items() if pid.isdigit() and not Path("/proc", pid).exists()]
    for directory in orphans:
        log.warning("removing %s, left by a process that is gone", directory)
        remove_pins(directory)
    return orphans


def remove_pins(pin_dir: Path) -> None:
    """Unpin an instance's program and maps, and the shared directory once it is empty."""
    shutil.rmtree(pin_dir, ignore_errors=True)
    try:
        PIN_ROOT.rmdir()
    except OSError:
        pass  # another instance is loading right now; it removes the directory after itself


def interface_index(ifname: str) -> int:
    return int(Path("/sys/class/net", ifname, "ifindex").read_text())


class EbpfDataPlane:
    """The SwitchML program on a set of ports (port number -> interface), in this kernel."""

    def __init__(
        self, ports: Mapping[int, str], *, k: int, name: str = "switch", max_pool_size: int = params.MAX_POOL_SIZE
    ) -> None:
        self.ports = dict(ports)
        self.name = name
        self.k = k
        self.max_pool_size = max_pool_size
        self.map_ids: dict[str, int] = {}
        self._attached: list[str] = []
        self._own_clsact: set[str] = set()
        self.program_id: int | None = None
        """The kernel's id of the loaded program, which every port's tc filter holds."""

    @property
    def running(self) -> bool:
        return bool(self._attached)

    @property
    def pid(self) -> None:
        """None: no process switches; the work is softirq time of whichever core received the frame."""
        return None

    @property
    def threads(self) -> dict[str, ThreadWatch]:
        """No thread: the kernel does it all."""
        return {}

    def start(self) -> None:
        obj = compile_program(CompileOptions(max_pool_size=self.max_pool_size, k=self.k))
        ensure_bpffs()
        remove_orphaned_pins()
        pin_dir = PIN_ROOT / f"{os.getpid()}-{self.name}-{next(_instances)}"
        try:
            make_pin_dir(pin_dir.name)
            run(["bpftool", "prog", "loadall", str(obj), str(pin_dir / "prog"), "pinmaps", str(pin_dir / "maps")])
            self.map_ids = self._wire_ports(pin_dir / "prog" / PROGRAM, pin_dir / "maps")
            for ifname in self.ports.values():
                self._attach(ifname, pin_dir / "prog" / PROGRAM)
            self.program_id = attached_program_id(next(iter(self.ports.values()))) if self.ports else None
        except BaseException:
            self.stop()
            raise
        finally:
            remove_pins(pin_dir)
        log.info("eBPF switch %s (k = %d) on %s (maps %s)", self.name, self.k, self.ports, self.map_ids)

    def _wire_ports(self, program: Path, map_dir: Path) -> dict[str, int]:
        """Map ids by name, after binding every map to the program (mc_node is the control
        plane's alone) and writing the port <-> interface maps."""
        opened = {path.name: BpfMap.from_pin(path) for path in sorted(map_dir.iterdir())}
        try:
            prog_fd = open_pinned(program)
            try:
                for bpf_map in opened.values():
                    bind_map(prog_fd, bpf_map.fd)
            finally:
                os.close(prog_fd)
            for port, ifname in self.ports.items():
                ifindex = interface_index(ifname)
                opened[maps.PORT_OF_IFINDEX_MAP].update(bytes(maps.U32Key(ifindex)), bytes(maps.U32Key(port)))
                opened[maps.IFINDEX_OF_PORT_MAP].update(bytes(maps.U32Key(port)), bytes(maps.U32Key(ifindex)))
            return {name: bpf_map.id for name, bpf_map in opened.items()}
        finally:
            for bpf_map in opened.values():
                bpf_map.close()

    def _attach(self, ifname: str, program: Path) -> None:
        qdiscs = json.loads(run(["tc", "-json", "qdisc", "show", "dev", ifname]).stdout or "[]")
        if not any(q.get("kind") == "clsact" for q in qdiscs):
            run(["tc", "qdisc", "add", "dev", ifname, "clsact"])
            self._own_clsact.add(ifname)
        self._attached.append(ifname)  # before the filter: stop() also undoes a half-done attach
        run(["tc", "filter", "add", "dev", ifname, "ingress", "pref", str(FILTER_PREF), "bpf", "direct-action", "pinned", str(program)])

    def problems(self) -> list[str]:
        """The ports the program is no longer attached to: a tc filter deleted from outside
        (``tc filter del``, a ``tc qdisc del ... clsact``) takes the switch off that port for
        good, while its maps stay frozen as the frames stopped arriving, so that the slots
        seem to wait for a rank."""
        detached = []
        for ifname in self._attached:
            if not Path("/sys/class/net", ifname).exists():
                continue  # the port is gone (the network is being torn down)
            try:
                attached = attached_program_id(ifname)
            except (LookupError, subprocess.CalledProcessError, ValueError):
                attached = None
            if attached != self.program_id:
                detached.append(ifname)
        if not detached:
            return []
        return [f"its eBPF program (id {self.program_id}) is no longer attached to the ingress of {', '.join(detached)} "
                f"(tc filter show dev {detached[0]} ingress shows no filter of it): frames there reach no switch"]

    def stop(self) -> None:
        """Detach from every port that still exists; idempotent."""
        for ifname in self._attached:
            if not Path("/sys/class/net", ifname).exists():
                continue  # the port is gone, and the filter with it
            commands = [["tc", "filter", "del", "dev", ifname, "ingress", "pref", str(FILTER_PREF)]]
            if ifname in self._own_clsact:
                commands.append(["tc", "qdisc", "del", "dev", ifname, "clsact"])
            for command in commands:
                try:
                    run(command)
                except EbpfStartError as error:
                    log.warning("%s: %s", self.name, error)
        self._attached.clear()
        self._own_clsact.clear()

    def control(self, command_log: Path | None = None) -> EbpfControl:
        if not self.running:
            raise RuntimeError(f"eBPF switch {self.name} is not running")
        return EbpfControl(self.map_ids, self.k, command_log)
