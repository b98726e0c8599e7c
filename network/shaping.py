"""Link shaping with tc, checked rather than assumed.

Mininet's TCLink only logs tc failures, and this project's machines lack netem (and, per
the docs, sometimes tbf). So the testbed probes once which qdiscs the kernel has, shapes
every link itself (htb for the rate, pfifo or netem for the queue, netem for delay/loss
when present), fails loudly when a tc command fails, and records what it applied. Loss
without netem is applied by the switch's drop simulator instead (see experiments/kinds/sweep.py).
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Sequence

from switches.target import PortQueueLimit
from switches.targets import delay_line_targets
from topologies.model import LinkSpec

log = logging.getLogger(__name__)

RunCommand = Callable[[Sequence[str]], tuple[int, str]]
"""Runs an argv (in some namespace) and returns (exit code, combined output)."""

HTB_BURST_KIB = 15
"""Each link's htb class's rate bucket (tc's k: 1,024 bytes). Its ceil is its rate, so the
smaller ceil bucket (``HTB_CBURST_BYTES``) is the one that holds frames back."""
HTB_CBURST_BYTES = 1600
"""Each link's htb class's ceil bucket: tc's own default (its default mtu of 1,600 bytes plus
ceil / psched hz, a fraction of a byte with the kernel's 1 GHz clock), given explicitly so
that the link does not depend on tc's version. htb sends a frame once both buckets are out
of debt and charges its bytes as it leaves, so after an idle spell two frames of 1 KiB leave
at the veth's speed before the link rate holds; simulation/link.py models it when asked
(``simulation.link_burst_bytes``; measured in benchmarks/README.md, "Simulated against emulated")."""


class ShapingError(RuntimeError):
    """A tc command that failed: the link would not be what the config says."""


@dataclass(frozen=True)
class TcCapabilities:
    """Which qdiscs this kernel accepts."""

    htb: bool
    netem: bool
    pfifo: bool

    def describe(self) -> dict[str, bool]:
        return {"htb": self.htb, "netem": self.netem, "pfifo": self.pfifo}


def run_local(argv: Sequence[str]) -> tuple[int, str]:
    """RunCommand for the current namespace."""
    done = subprocess.run(list(argv), capture_output=True, text=True)
    return done.returncode, (done.stdout + done.stderr).strip()


@lru_cache(maxsize=1)
def probe_tc() -> TcCapabilities:
    """Try each qdisc on a throw-away veth pair in a throw-away namespace."""
    netns = f"smltcprobe{os.getpid()}"

    def ok(*argv: str) -> bool:
        return run_local(["ip", "netns", "exec", netns, *argv])[0] == 0

    code, out = run_local(["ip", "netns", "add", netns])
    if code != 0:
        raise ShapingError(f"cannot create a namespace to probe tc (are we root?): {out}")
    try:
        if not ok("ip", "link", "add", "probea", "type", "veth", "peer", "name", "probeb"):
            raise ShapingError("cannot create a veth pair to probe tc")
        htb = ok("tc", "qdisc", "add", "dev", "probea", "root", "handle", "5:", "htb", "default", "1")
        pfifo = ok("tc", "qdisc", "add", "dev", "probeb", "root", "pfifo", "limit", "10")
        netem = ok("tc", "qdisc", "replace", "dev", "probeb", "root", "netem", "delay", "1ms")
    finally:
        run_local(["ip", "netns", "delete", netns])
    caps = TcCapabilities(htb=htb, netem=netem, pfifo=pfifo)
    log.info("tc capabilities: %s", caps.describe())
    return caps


@dataclass(frozen=True)
class AppliedShaping:
    """What one interface got: each item either a mechanism or 'not applied: why'."""

    interface: str
    bandwidth: str
    queue: str
    delay: str
    loss: str


def _tc(run: RunCommand, interface: str, *args: str) -> None:
    code, out = run(["tc", *args])
    if code != 0:
        raise ShapingError(f"tc {' '.join(args)} failed on {interface}: {out or 'exit code ' + str(code)}")


def cut_queue(queue_packets: int, queue_limit: PortQueueLimit | None) -> int:
    """A switch port's queue depth for a link of ``queue_packets``: cut to its target's
    ``port_queue_limit`` where that is shallower."""
    return queue_packets if queue_limit is None else min(queue_packets, queue_limit.packets)


def shape_interface(
    run: RunCommand, interface: str, spec: LinkSpec, caps: TcCapabilities, loss_by_netem: bool, delay_by_netem: bool,
    queue_limit: PortQueueLimit | None = None,
) -> AppliedShaping:
    """Shape the egress of ``interface`` as ``spec`` says; raise ShapingError on any failure.

    Rate: htb class 5:1 at bw_mbps. Below it, netem (delay when ``delay_by_netem``, loss
    when ``loss_by_netem``) with the queue limit, or pfifo with the queue limit. Delay and
    loss not given to netem are the switch's (its delay line and drop simulator), and the
    record says so; netem asked of a kernel without it is an error, never a silent no-op.
    ``queue_limit``: a switch port's deepest queue (its target's ``port_queue_limit``),
    which a deeper ``queue_packets`` is cut to, saying so in the record.
    """
    queue_packets = cut_queue(spec.queue_packets, queue_limit)
    queue_note = f" (queue_packets {spec.queue_packets} cut: {queue_limit.why})" if queue_limit is not None and queue_packets < spec.queue_packets else ""
    wants_netem = (delay_by_netem and spec.delay_ms > 0) or (loss_by_netem and spec.loss > 0)
    if wants_netem and not caps.netem:
        raise ShapingError(
            f"{interface}: delay {spec.delay_ms} ms / loss {spec.loss} by netem, which this kernel does not have "
            "(tc qdisc netem); use the switch's delay line and drop simulator instead (a target that delays frames: "
            f"{', '.join(delay_line_targets())})"
        )
    parent = ["root"]
    bandwidth = "unshaped"
    if spec.bw_mbps is not None:
        if not caps.htb:
            raise ShapingError(f"{interface}: bw_mbps {spec.bw_mbps} needs htb, which this kernel does not have")
        _tc(run, interface, "qdisc", "replace", "dev", interface, "root", "handle", "5:", "htb", "default", "1")
        _tc(run, interface, "class", "add", "dev", interface, "parent", "5:", "classid", "5:1", "htb", "rate", f"{spec.bw_mbps}mbit", "burst", f"{HTB_BURST_KIB}k",
            "cburst", f"{HTB_CBURST_BYTES}b")
        parent = ["parent", "5:1"]
        bandwidth = f"htb {spec.bw_mbps} Mbit/s"
    delay = "none requested" if spec.delay_ms == 0 else "switch_delay_line"
    loss = "none requested" if spec.loss == 0 else "switch_drop_simulator"
    if wants_netem:
        netem = ["netem", "limit", str(queue_packets)]
        if delay_by_netem and spec.delay_ms > 0:
            netem += ["delay", f"{spec.delay_ms}ms"]
            delay = f"netem {spec.delay_ms} ms"
        if loss_by_netem and spec.loss > 0:
            netem += ["loss", f"{spec.loss * 100:.6f}%"]
            loss = f"netem {spec.loss:.6%}"
        _tc(run, interface, "qdisc", "replace", "dev", interface, *parent, "handle", "10:", *netem)
        queue = f"netem limit {queue_packets}{queue_note}"
    elif caps.pfifo:
        _tc(run, interface, "qdisc", "replace", "dev", interface, *parent, "handle", "10:", "pfifo", "limit", str(queue_packets))
        queue = f"pfifo {queue_packets} packets{queue_note}"
    else:
        raise ShapingError(f"{interface}: queue_packets needs pfifo or netem; this kernel has neither")
    return AppliedShaping(interface=interface, bandwidth=bandwidth, queue=queue, delay=delay, loss=loss)


def disable_offloads(run: RunCommand, interface: str) -> None:
    """Turn off checksum and segmentation offloads on a veth end.

    A user-space switch reads frames with AF_PACKET: with offloads on, it would see
    64 KB TCP super-frames it cannot send back out, and UDP/TCP checksums left for a NIC
    that does not exist.
    """
    code, out = run(["ethtool", "-K", interface, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"])
    if code != 0:
        raise ShapingError(f"ethtool -K {interface} (disable offloads) failed: {out}")


ALLOWED_CONGESTION_CONTROL = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")
"""The congestion controls a network namespace other than the first may choose: one list for
the whole kernel, set from the first namespace. Linux starts it as reno and the boot's
default, so a machine that boots with BBR (Debian's setting here: "reno bbr") refuses cubic
to every emulated host with EPERM."""


def allow_congestion_control(algorithm: str) -> None:
    """Let the hosts' namespaces choose ``algorithm``: add it to the kernel's allowed list
    where it is missing (only widens what namespaces may pick; the machine's own default is
    unchanged, and it stays so for later runs). Run in the first namespace, as root."""
    allowed = ALLOWED_CONGESTION_CONTROL.read_text().split()
    if algorithm in allowed:
        return
    log.info("net.ipv4.tcp_allowed_congestion_control: adding %s, so that the hosts' namespaces may use it (was: %s)",
             algorithm, " ".join(allowed))
    try:
        ALLOWED_CONGESTION_CONTROL.write_text(" ".join([*allowed, algorithm]))
    except OSError as exc:
        raise ShapingError(f"net.ipv4.tcp_allowed_congestion_control: cannot add {algorithm} ({exc}); the hosts' namespaces "
                           f"may use only {' '.join(allowed)}: set tcp_congestion_control to one of them") from None


def pin_congestion_control(run: RunCommand, host: str, algorithm: str) -> None:
    """Give a host's TCP the congestion control the config names, whatever this machine's default.

    A new network namespace takes the machine's default (net.ipv4.tcp_congestion_control),
    so the baselines would measure whatever the machine was set up with. It matters: the
    main job's PS at 10 Mbit/s (14 TCP streams into every host port) took 10.9 s with 36,190
    retransmissions under BBR, a Debian machine's setting here, and 7.6 s with 875 under
    cubic, Linux's default and the Vagrant VM's; the ring, one stream per link, 6.8 s and
    6.5 s."""
    code, out = run(["sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={algorithm}"])
    if code != 0:
        _, available = run(["cat", "/proc/sys/net/ipv4/tcp_available_congestion_control"])
        if algorithm in available.split():  # offered, but not to namespaces (allow_congestion_control, on that server)
            _, allowed = run(["cat", str(ALLOWED_CONGESTION_CONTROL)])
            raise ShapingError(f"{host}: tcp_congestion_control {algorithm!r} is not allowed to network namespaces "
                               f"(net.ipv4.tcp_allowed_congestion_control: {allowed or 'unknown'}; add it there as root): {out}")
        raise ShapingError(f"{host}: tcp_congestion_control {algorithm!r} is not one this kernel offers "
                           f"(net.ipv4.tcp_available_congestion_control: {available or 'unknown'}): {out}")


def silence_ipv6(run: RunCommand, interface: str) -> None:
    """Disable IPv6 on an interface: no router solicitations or MLD reports in the measurements.

    The testbed speaks IPv4 only; IPv6 housekeeping would add unmeasured packets to the
    links and make switches learn addresses before the control plane programs them.
    """
    code, out = run(["sysctl", "-q", "-w", f"net.ipv6.conf.{interface}.disable_ipv6=1"])
    if code != 0:
        raise ShapingError(f"disabling IPv6 on {interface} failed: {out}")
