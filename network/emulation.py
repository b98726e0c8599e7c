"""The emulated network: a topology built in Mininet, shaped, addressed and programmed.

``EmulatedNetwork`` is a context manager: on entry it builds the Mininet network (hosts,
one switch node per topology switch running the chosen target, plain veth links), turns
off NIC offloads (a user-space switch needs real frames), shapes every link with tc,
installs static ARP entries (no ARP traffic to lose), and programs every switch through
the one control-plane interface. On exit -- normal, exception or Ctrl-C -- it stops
Mininet, which kills the host shells and switch processes and deletes the veths, and then
checks that none of its interfaces survived; a second Ctrl-C waits until that is done.

A run killed with SIGKILL cannot do any of this, so the network records in its lock what it
made (interfaces, its temporary folder, which holds the switches' control sockets, and
folders the runner declares), and the next network to take the lock removes what a dead
holder recorded, and any interface with its own names, before it builds (network.cleanup).
"""

from __future__ import annotations

import logging
import re
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from mininet.link import Link
from mininet.net import Mininet
from mininet.node import Host, Node

from network.cleanup import SCRATCH_PREFIX, delete_interfaces, remove_leftovers, root_interfaces
from base.lifetime import deferred_signals
from network.lock import NetworkLock
from network.shaping import AppliedShaping, TcCapabilities, disable_offloads, probe_tc, shape_interface, silence_ipv6
from protocol import params
from switches import programming
from switches.control import SwitchControl
from switches.targets import node_class
from topologies.model import Topology

log = logging.getLogger(__name__)


class NetworkError(RuntimeError):
    """The emulated network could not be built or torn down as configured."""


def node_runner(node: Node):
    """RunCommand that executes an argv inside ``node``'s namespace."""

    def run(argv: Sequence[str]) -> tuple[int, str]:
        out, err, code = node.pexec(list(argv))
        return code, (out + err).strip()

    return run


@dataclass(frozen=True)
class SharedJob:
    """One of several jobs on the aggregating switch: its id, its workers' hosts (rank
    order) and its pool; the control plane gives it its own slots and multicast group."""

    job_id: int
    hosts: tuple[str, ...]
    pool_size: int


@dataclass
class NetworkReport:
    """What the network actually is, for the results: mechanisms applied per link."""

    target: str
    tc_capabilities: dict[str, bool]
    loss_mechanism: str
    delay_mechanism: str
    aggregation: str
    """spine or hierarchical (topology.aggregation): which switches aggregate."""
    links: list[dict[str, str]] = field(default_factory=list)


class EmulatedNetwork:
    """A running Mininet network for one topology and switch target."""

    def __init__(
        self,
        topology: Topology,
        target: str,
        log_dir: Path,
        k: int,
        max_pool_size: int,
        job_id: int,
        loss_mechanism: str = "auto",
        jobs: Sequence[SharedJob] = (),
    ) -> None:
        """One job (``job_id``, every host a worker) unless ``jobs`` lists several."""
        self.topology = topology
        self.target = target
        self.log_dir = log_dir
        self.k = k
        self.max_pool_size = max_pool_size
        self.job_id = job_id
        self.jobs = tuple(jobs)
        self.requested_loss_mechanism = loss_mechanism
        self.net: Mininet | None = None
        self._lock = NetworkLock()
        self._scratch: Path | None = None
        self.controls: dict[str, SwitchControl] = {}
        self.report: NetworkReport | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> "EmulatedNetwork":
        self._lock.acquire()
        try:
            self._remove_leftovers()
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _remove_leftovers(self) -> None:
        """What a killed run left (its record in the lock), and interfaces with our names."""
        previous = self._lock.previous
        if previous is not None:
            removed = remove_leftovers(previous)
            log.warning("the run with pid %d died holding the network; removed what it left: %s",
                        previous.pid, ", ".join(removed) or "nothing was left")
        nodes = "|".join(re.escape(n.name) for n in [*self.topology.hosts, *self.topology.switches])
        ours = re.compile(rf"^({nodes})-eth\d+$")
        stale = delete_interfaces([name for name in root_interfaces() if ours.match(name)])
        if stale:
            log.warning("deleted interfaces left by an earlier network (no record of whose): %s", ", ".join(stale))

    def declare_directory(self, path: Path) -> None:
        """Have ``path`` removed by the next run if this process dies while it holds the network."""
        self._lock.declare(directories=[str(path)])

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        caps = probe_tc()
        loss_mechanism = self._choose_loss_mechanism(caps)
        delay_mechanism = self._choose_delay_mechanism(caps)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        switch_cls = node_class(self.target)
        switch_options = {"log_dir": self.log_dir, "k": self.k, "max_pool_size": self.max_pool_size}
        if delay_mechanism == "switch_delay_line":
            switch_options["link_delay_ms"] = self.topology.links[0].spec.delay_ms
        self._scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        self.declare_directory(self._scratch)
        net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False, autoStaticArp=False, waitConnected=False)
        self.net = net
        for host in self.topology.hosts:
            net.addHost(host.name, cls=Host, ip=f"{host.ipv4}/24", mac=host.mac)
        for switch in self.topology.switches:
            net.addSwitch(switch.name, cls=switch_cls, **switch_options)
        for link in self.topology.links:
            net.addLink(link.a, link.b, cls=Link)
        self._lock.declare(interfaces=self._interface_names(net))
        net.build()
        for node in [*net.hosts, *net.switches]:
            run = node_runner(node)
            for intf in node.intfList():
                if intf.name != "lo":
                    disable_offloads(run, intf.name)
                    silence_ipv6(run, intf.name)
        applied = self._shape(caps, loss_by_netem=loss_mechanism == "netem", delay_by_netem=delay_mechanism == "netem")
        tempfile.tempdir, default_tempdir = str(self._scratch), tempfile.tempdir
        try:
            net.start()  # the switches' temporary files (control sockets) go into the scratch folder
        finally:
            tempfile.tempdir = default_tempdir
        self._static_arp()
        self.report = NetworkReport(
            target=self.target,
            tc_capabilities=caps.describe(),
            loss_mechanism=loss_mechanism,
            delay_mechanism=delay_mechanism,
            aggregation=self.topology.aggregation,
            links=[asdict(a) for a in applied],
        )
        self._program_switches(loss_mechanism)

    def close(self) -> None:
        """Stop everything this network started; safe to call twice. SIGINT and SIGTERM wait
        until it is done: a half-done teardown leaks namespaces, veths and processes."""
        with deferred_signals():
            self._close()

    def _close(self) -> None:
        for control in self.controls.values():
            try:
                control.close()
            except Exception:  # the switch may already be gone; teardown goes on
                log.exception("closing a control-plane connection")
        self.controls.clear()
        try:
            if self.net is not None:
                net, self.net = self.net, None
                try:
                    # Switch processes first, while their interfaces still exist (Mininet
                    # deletes links before it stops switches).
                    for switch in net.switches:
                        switch.stop(deleteIntfs=False)
                    net.stop()
                finally:
                    self._check_nothing_left(net)
        finally:
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)
                self._scratch = None
            self._lock.release()

    @staticmethod
    def _interface_names(net: Mininet) -> list[str]:
        return [intf.name for node in [*net.hosts, *net.switches] for intf in node.intfList() if intf.name != "lo"]

    def _check_nothing_left(self, net: Mininet) -> None:
        left = delete_interfaces(sorted(self._interface_names(net)))
        if left:
            raise NetworkError(f"interfaces survived Mininet's stop and were deleted: {', '.join(left)}")

    # -- construction steps ------------------------------------------------------------

    def _choose_loss_mechanism(self, caps: TcCapabilities) -> str:
        losses = {l.spec.loss for l in self.topology.links}
        if losses == {0.0}:
            return "none"
        wanted = self.requested_loss_mechanism
        if wanted == "netem" and not caps.netem:
            raise NetworkError("loss_mechanism: netem requested, but this kernel has no netem qdisc; use auto or switch")
        if wanted == "netem" or (wanted == "auto" and caps.netem):
            return "netem"
        try:
            self.topology.drop_simulator_rates()
        except ValueError as exc:
            raise NetworkError(str(exc)) from None
        return "switch_drop_simulator"

    def _choose_delay_mechanism(self, caps: TcCapabilities) -> str:
        """netem where the kernel has it; else the embedded switch's delay line (bmv2 has none)."""
        delays = {l.spec.delay_ms for l in self.topology.links}
        if delays == {0.0}:
            return "none"
        if caps.netem:
            return "netem"
        if self.target != "embedded":
            raise NetworkError(
                f"link delay needs netem, which this kernel lacks, and the {self.target} switch cannot delay frames; "
                "use the embedded switch (--switch embedded) or a kernel with sch_netem"
            )
        if len(delays) > 1:
            raise NetworkError(f"links have different delays {sorted(delays)}; the switch's delay line applies one")
        return "switch_delay_line"

    def _shape(self, caps: TcCapabilities, loss_by_netem: bool, delay_by_netem: bool) -> list[AppliedShaping]:
        assert self.net is not None
        applied = []
        for link in self.topology.links:
            node_a, node_b = self.net.get(link.a), self.net.get(link.b)
            for node, other in ((node_a, node_b), (node_b, node_a)):
                intf, _ = node.connectionsTo(other)[0]
                applied.append(shape_interface(node_runner(node), intf.name, link.spec, caps, loss_by_netem, delay_by_netem))
        return applied

    def _static_arp(self) -> None:
        """Every host knows every other host and the aggregator's virtual address."""
        assert self.net is not None
        entries = [(h.ipv4, h.mac) for h in self.topology.hosts]
        entries.append((self.topology.aggregator_ipv4, self.topology.aggregator_mac))
        for host in self.topology.hosts:
            node = self.net.get(host.name)
            intf = node.defaultIntf().name
            run = node_runner(node)
            for ipv4, mac in entries:
                if ipv4 != host.ipv4:
                    code, out = run(["ip", "neigh", "replace", ipv4, "lladdr", mac, "dev", intf, "nud", "permanent"])
                    if code != 0:
                        raise NetworkError(f"{host.name}: static ARP entry {ipv4} -> {mac} failed: {out}")

    def port_towards(self, switch: str, node: str) -> int:
        """The switch port on the path from ``switch`` to ``node``."""
        assert self.net is not None
        sw = self.net.get(switch)
        hop = self.net.get(self.topology.next_hop(switch, node))
        intf, _ = sw.connectionsTo(hop)[0]
        return sw.ports[intf]

    def _program_switches(self, loss_mechanism: str) -> None:
        assert self.net is not None
        aggregator = self.topology.aggregator.name
        workers = [
            programming.WorkerPort(rank=h.rank, switch_port=self.port_towards(aggregator, h.name), mac=h.mac, ipv4=h.ipv4)
            for h in self.topology.hosts
        ]
        hierarchical = self.topology.aggregation == "hierarchical"
        drop_rates = self.topology.drop_simulator_rates() if loss_mechanism == "switch_drop_simulator" else {}
        for switch in self.topology.switches:
            node = self.net.get(switch.name)
            control = node.control(self.log_dir / f"{switch.name}.commands")
            self.controls[switch.name] = control
            ports = sorted(p for intf, p in node.ports.items() if intf.name != "lo")
            l2 = {h.mac: self.port_towards(switch.name, h.name) for h in self.topology.hosts}
            if switch.name != aggregator:
                l2[self.topology.aggregator_mac] = self.port_towards(switch.name, aggregator)
                if hierarchical:
                    programming.program_aggregation(control, self._leaf_job(switch.name))
                else:
                    programming.program_pass_through(control)
            elif hierarchical:
                programming.program_aggregation(control, self._spine_job())
            elif self.jobs:
                programming.program_jobs(control, programming.admit_jobs(self._job_requests(aggregator), self.max_pool_size))
            else:
                programming.program_aggregation(control, programming.JobProgram(job_id=self.job_id, workers=workers))
            programming.program_forwarding(control, ports, l2)
            if loss_mechanism == "switch_drop_simulator":  # topologies.model.Topology.drop_simulator_rates
                programming.set_drop_probability(control, *drop_rates[switch.name])

    def _spine_job(self) -> programming.JobProgram:
        """Hierarchical aggregation at the spine: the leaves are its workers, answered on the
        aggregation port so that their parsers take the results as SwitchML."""
        spine = self.topology.aggregator.name
        leaves = [leaf.name for leaf in self.topology.leaves if self.topology.local_hosts(leaf.name)]
        return programming.JobProgram(self.job_id, [
            programming.WorkerPort(rank, self.port_towards(spine, leaf), *self.topology.leaf_address(leaf), udp_port=params.UDP_PORT_BASE)
            for rank, leaf in enumerate(leaves)
        ])

    def _leaf_job(self, leaf: str) -> programming.JobProgram:
        """Hierarchical aggregation at a leaf: its own hosts, and the spine above (the
        aggregator's virtual address, which the workers send to)."""
        mac, ipv4 = self.topology.leaf_address(leaf)
        uplink = programming.Uplink(self.port_towards(leaf, self.topology.aggregator.name), mac, ipv4,
                                    self.topology.aggregator_mac, self.topology.aggregator_ipv4)
        workers = [programming.WorkerPort(rank, self.port_towards(leaf, h.name), h.mac, h.ipv4)
                   for rank, h in enumerate(self.topology.local_hosts(leaf))]
        return programming.JobProgram(self.job_id, workers, uplink=uplink)

    @property
    def aggregating_controls(self) -> list[SwitchControl]:
        """The switches that hold aggregation state: the aggregator, and in hierarchical
        aggregation every leaf with workers."""
        if self.topology.aggregation != "hierarchical":
            return [self.aggregator_control]
        return [self.controls[s.name] for s in self.topology.switches if s.aggregate or self.topology.local_hosts(s.name)]

    def _job_requests(self, aggregator: str) -> list[programming.JobRequest]:
        hosts = {h.name: h for h in self.topology.hosts}
        return [
            programming.JobRequest(job.job_id, [
                programming.WorkerPort(rank, self.port_towards(aggregator, name), hosts[name].mac, hosts[name].ipv4)
                for rank, name in enumerate(job.hosts)
            ], job.pool_size)
            for job in self.jobs
        ]

    # -- access ------------------------------------------------------------------------

    def host(self, name: str) -> Host:
        assert self.net is not None
        return self.net.get(name)

    @property
    def aggregator_control(self) -> SwitchControl:
        return self.controls[self.topology.aggregator.name]

    def switch_processes(self) -> dict[str, int]:
        """Switch name -> pid of the process doing its switching: what the workers depend on
        and whose CPU share is measured. An eBPF switch has none (switch_pid None): it lives
        as long as its ports, and its work is softirq time, which the machine's busy share counts."""
        assert self.net is not None
        return {sw.name: sw.switch_pid for sw in self.net.switches if sw.switch_pid is not None}

    def describe(self) -> dict[str, Any]:
        assert self.report is not None
        return asdict(self.report)

