"""Network namespaces wired to a switch by veth pairs: the packet-level test bed.

``Testbed(n)`` creates hosts ``{prefix}h{i}`` (one network namespace each,
holding one end of a veth pair with a MAC and 10.0.0.{i+1}/24; they resolve every address,
the switch's too, by ARP) and leaves the other end, ``{prefix}s{i}``, in the root namespace as
switch port i+1 (the root namespace is where Mininet switches run too). The prefix is
derived from the pid plus a per-process counter, so concurrent runs never collide, and
every name stays within Linux's 15-character limit. Teardown removes exactly what was
created, also when set-up fails halfway.

IPv6 is disabled on both ends: router solicitations and DAD probes would otherwise cross
the switch as ordinary traffic and disturb counters and captures.

Code can run inside a host namespace three ways: ``host.socket(...)`` (a socket created in
the namespace, usable from this process), ``host.run(fn, *args)`` (a forked child that
enters the namespace and returns fn's result) and ``host.popen(argv)`` (a command).
"""

from __future__ import annotations

import ctypes
import itertools
import logging
import os
import pickle
import select
import socket
import subprocess
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from base.linux_sockets import ETH_P_ALL, PACKET_IGNORE_OUTGOING, SOL_PACKET

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
NETNS_DIR = Path("/var/run/netns")
MAX_IFNAME = 15
_libc = ctypes.CDLL(None, use_errno=True)
_testbed_counter = itertools.count()


def ip(*args: str) -> None:
    """Run one ``ip`` command; a failure raises with its stderr."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


@contextmanager
def in_namespace(netns: str) -> Iterator[None]:
    """Run the body (this thread only) inside network namespace ``netns``, then come back."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        target = os.open(NETNS_DIR / netns, os.O_RDONLY)
        try:
            _setns(target)
            try:
                yield
            finally:
                _setns(own)
        finally:
            os.close(target)
    finally:
        os.close(own)


def _write_sysctl(path: str, value: str) -> None:
    Path("/proc/sys", path).write_text(value)


@dataclass
class Host:
    """One host: a namespace with one interface cabled to switch port ``switch_port``."""

    netns: str
    index: int
    ifname: str
    switch_ifname: str
    switch_port: int
    mac: str
    ipv4: str

    def socket(self, family: int, type_: int, proto: int = 0) -> socket.socket:
        """A socket that lives in this host's namespace."""
        with in_namespace(self.netns):
            return socket.socket(family, type_, proto)

    def raw_socket(self) -> socket.socket:
        """An AF_PACKET socket on the host's interface that sees only incoming frames."""
        sock = self.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
        try:
            sock.setsockopt(SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)
            with in_namespace(self.netns):
                sock.bind((self.ifname, ETH_P_ALL))
        except BaseException:
            sock.close()
            raise
        return sock

    def udp_socket(self, port: int) -> socket.socket:
        """A UDP socket bound to ``port`` on the host's address."""
        sock = self.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind((self.ipv4, port))
        except BaseException:
            sock.close()
            raise
        return sock

    def run(self, fn: Callable[..., Any], *args: Any, timeout: float = 60.0) -> Any:
        """``fn(*args)`` in a forked child inside the namespace; its result or its exception."""
        return run_in_namespace(self.netns, fn, *args, timeout=timeout)

    def popen(self, argv: list[str], **kwargs: Any) -> subprocess.Popen:
        """A command running in the namespace (``ip netns exec``)."""
        return subprocess.Popen(["ip", "netns", "exec", self.netns, *argv], **kwargs)


class NamespaceCallError(RuntimeError):
    """The callable raised in the namespace; the message carries the child's traceback."""


def run_in_namespace(netns: str, fn: Callable[..., Any], *args: Any, timeout: float = 60.0) -> Any:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never returns into the caller's code
        status = 0
        try:
            os.close(read_end)
            target = os.open(NETNS_DIR / netns, os.O_RDONLY)
            _setns(target)
            try:
                payload = pickle.dumps((True, fn(*args)))
            except BaseException:
                payload = pickle.dumps((False, traceback.format_exc()))
            with os.fdopen(write_end, "wb") as out:
                out.write(payload)
        except BaseException:
            status = 1
        finally:
            os._exit(status)
    os.close(write_end)
    chunks = []
    try:
        with os.fdopen(read_end, "rb") as inp:
            while True:
                ready, _, _ = select.select([inp], [], [], timeout)
                if not ready:
                    os.kill(pid, 9)
                    raise TimeoutError(f"{getattr(fn, '__name__', fn)} in {netns} took more than {timeout} s")
                chunk = inp.read1(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        os.waitpid(pid, 0)
    if not chunks:
        raise NamespaceCallError(f"{getattr(fn, '__name__', fn)} in {netns}: child died without a result")
    ok, value = pickle.loads(b"".join(chunks))
    if not ok:
        raise NamespaceCallError(f"{getattr(fn, '__name__', fn)} in {netns} raised:\n{value}")
    return value


def host_mac(index: int) -> str:
    return f"02:00:0a:00:00:{index + 1:02x}"


def host_ipv4(index: int) -> str:
    return f"10.0.0.{index + 1}"


@dataclass
class Testbed:
    """``n_hosts`` hosts, each cabled to one switch port (host i on port i + 1)."""

    __test__ = False  # not a pytest test class despite its name

    n_hosts: int
    prefix: str = field(default_factory=lambda: f"sml{os.getpid()}{'abcdefghijklmnopqrstuvwxyz'[next(_testbed_counter) % 26]}")
    hosts: list[Host] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 1 <= self.n_hosts <= 253:
            raise ValueError(f"1..253 hosts fit 10.0.0.0/24 next to the switch, got {self.n_hosts}")
        if len(f"{self.prefix}h{self.n_hosts - 1}") > MAX_IFNAME:
            raise ValueError(f"prefix {self.prefix!r} makes interface names longer than {MAX_IFNAME}")

    @property
    def switch_ports(self) -> dict[int, str]:
        """Port number -> root-namespace interface, what the switch is started with."""
        return {h.switch_port: h.switch_ifname for h in self.hosts}

    def __enter__(self) -> "Testbed":
        try:
            for i in range(self.n_hosts):
                host = Host(
                    netns=f"{self.prefix}h{i}",
                    index=i,
                    ifname=f"{self.prefix}h{i}",
                    switch_ifname=f"{self.prefix}s{i}",
                    switch_port=i + 1,
                    mac=host_mac(i),
                    ipv4=host_ipv4(i),
                )
                self.hosts.append(host)  # before creating anything, so close() removes it
                self._create(host)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create(self, host: Host) -> None:
        ip("netns", "add", host.netns)
        with in_namespace(host.netns):
            for scope in ("all", "default"):
                _write_sysctl(f"net/ipv6/conf/{scope}/disable_ipv6", "1")
        ip("link", "add", host.ifname, "type", "veth", "peer", "name", host.switch_ifname)
        ip("link", "set", host.ifname, "netns", host.netns)
        _write_sysctl(f"net/ipv6/conf/{host.switch_ifname}/disable_ipv6", "1")
        ip("link", "set", host.switch_ifname, "up")
        ns = ["-n", host.netns]
        ip(*ns, "link", "set", "lo", "up")
        ip(*ns, "link", "set", host.ifname, "address", host.mac)
        ip(*ns, "addr", "add", f"{host.ipv4}/24", "dev", host.ifname)
        ip(*ns, "link", "set", host.ifname, "up")

    def close(self) -> None:
        """Delete every namespace and root-side veth end this test bed created."""
        for host in self.hosts:
            for args in (("link", "del", host.switch_ifname), ("netns", "del", host.netns)):
                try:
                    ip(*args)
                except RuntimeError as exc:
                    log.debug("cleanup: %s", exc)
        self.hosts.clear()
