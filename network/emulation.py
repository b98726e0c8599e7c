"""The emulated network: a topology built in Mininet, shaped, addressed and programmed.

``EmulatedNetwork`` is a context manager: on entry it builds the Mininet network (hosts,
one switch node per topology switch running the chosen target, plain veth links), turns
off NIC offloads (a user-space switch needs real frames), shapes every link with tc,
installs static ARP entries between the hosts (the switch's virtual address they resolve
by ARP: the switch answers it, and every host asks once before a run starts), and hands the
protocol's programmer (its record's ``program_fabric``) what it needs to program the
switches: names, addresses, the port towards every node (switches/fabric.py), the jobs. On
exit -- normal, exception or Ctrl-C -- it stops the switches, kills every node's shell and
deletes the veths, and then checks that none of its interfaces survived; a second Ctrl-C
waits until that is done.

Every wait on a node's shell is bounded. Mininet talks to a shell through a pty whose
other end it keeps open itself, so reading from a shell that died waits forever (a host
shell killed mid-run hung runs for good, in the teardown, holding the network lock). This
network closes Mininet's copy of that end as soon as a node exists: a dead shell then
makes a command fail (EIO) at once, and the failure is named by the process that died
(``dependencies``). Its teardown does not use the shells at all: it kills them (SIGKILL, a
stopped shell included) and deletes the veths from the root namespace.

The jobs are protocol-neutral (methods/aggregation.py's ``Job``: a protocol's record, its
typed parameters, its hosts). A switch runs one protocol's program at a time: the first
job's from the start (with no job, its target's default program), and ``prepare(method)``
loads another protocol's on every switch (restarting their data planes: ``TargetSwitch.load``)
when a run moves to a method of it; every program forwards ordinary traffic, so the
baselines run on whichever is loaded. A protocol that runs servers beside its workers
(``servers_per_job``) gets them as extra hosts on the aggregating switch (network/servers.py).

A run killed with SIGKILL cannot do any of this, so the network records in its lock what it
made (interfaces, its temporary folder, which holds the switches' control sockets, and
folders the runner declares), and the next network to take the lock removes what a dead
holder recorded, and any interface with its own names, before it builds (network.cleanup).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from mininet.link import Link
from mininet.net import Mininet
from mininet.node import Host, Node

import methods
from base.plugin import resolve
from methods.aggregation import Aggregation, Job
from methods.method import Method
from network.cleanup import SCRATCH_PREFIX, delete_interfaces, remove_leftovers, root_interfaces
from network.cluster import Cluster, ClusterHost, VxlanLink, cluster_switch_class, preflight
from network.cluster_config import LOCAL, ClusterSpec
from base.lifetime import EXIT_NOTICE_S, Dependencies, Dependency, DependencyExited, deferred_signals
from network.evidence import carrier_lost
from network.lock import NetworkLock
from network.shaping import (
    AppliedShaping,
    TcCapabilities,
    cut_queue,
    disable_offloads,
    allow_congestion_control,
    pin_congestion_control,
    probe_tc,
    shape_interface,
    silence_ipv6,
)
from network.servers import ServerError, ServerHost, ServerPlanError, ServerProcess, plan_servers, server_link
from protocol.params import mbps_to_bps
from switches.control import SwitchControl
from switches.fabric import Fabric, FabricJob, Station
from switches.topology_fabric import topology_fabric
from switches.targets import delay_line_targets, lookup
from topologies.model import LinkDef, Topology

log = logging.getLogger(__name__)


class NetworkError(RuntimeError):
    """The emulated network could not be built or torn down as configured."""


SHELL_KILL_WAIT_S = 5.0
"""How long the teardown waits for a node's shell to die of SIGKILL."""


def own_shell(node: Node) -> None:
    """Close this process's copy of the pty end ``node``'s shell writes to (Mininet keeps it
    open, so that a read from a dead shell never ends): reading a dead shell's output then
    fails with EIO instead of hanging. ``stop_shell`` is then the only way to stop ``node``;
    Mininet's own (``terminate``) would close the end again."""
    os.close(node.slave)
    node.slave = None


def stop_shell(node: Node) -> None:
    """Kill ``node``'s shell and what it runs (its process group), wait a bounded time for
    it, and close its pty; never writes to or reads from the shell, which may be dead or
    stopped."""
    if node.shell is None:
        return
    try:
        os.killpg(node.shell.pid, signal.SIGKILL)
    except ProcessLookupError:  # dead already (a zombie leads no group)
        pass
    try:
        node.shell.wait(timeout=SHELL_KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        log.error("the shell of %s (pid %d) did not die within %g s of SIGKILL; leaving it", node.name, node.shell.pid, SHELL_KILL_WAIT_S)
    node.stdin.close()
    node.shell = None


RESOLVE_AGGREGATOR = ["ping", "-q", "-c", "1", "-i", "0.2", "-w", "10"]
"""Until one echo comes back, every 0.2 s for at most 10 s: a lossy link loses some."""


def node_runner(node: Node):
    """RunCommand that executes an argv inside ``node``'s namespace."""

    def run(argv: Sequence[str]) -> tuple[int, str]:
        out, err, code = node.pexec(list(argv))
        return code, (out + err).strip()

    return run


@dataclass
class NetworkReport:
    """What the network actually is, for the results: mechanisms applied per link."""

    target: str
    tc_capabilities: dict[str, bool]
    loss_mechanism: str
    delay_mechanism: str
    aggregation: str
    """spine or hierarchical (topology.aggregation): which switches aggregate."""
    tcp_congestion_control: str
    """What every host's TCP runs (``pin_congestion_control``)."""
    links: list[dict[str, str]] = field(default_factory=list)
    servers: dict[str, str] = field(default_factory=dict)
    """Node -> the server it ran on (``local``: this machine), with a ``cluster:`` section; else
    empty, and left out of the results."""


class EmulatedNetwork:
    """A running Mininet network for one topology and switch target."""

    def __init__(
        self,
        topology: Topology,
        target: str,
        log_dir: Path,
        k: int,
        max_pool_size: int,
        jobs: Sequence[Job] = (),
        loss_mechanism: str = "auto",
        tcp_congestion_control: str = "cubic",
        cluster: ClusterSpec | None = None,
    ) -> None:
        """``jobs``: every in-network job the run may prepare, of any protocols (each protocol's
        jobs together on its program); ``k`` and ``max_pool_size`` (the switch's memory, in the
        protocol's unit): what every switch program is built for. On this machine alone unless
        ``cluster`` names other servers (network/cluster.py)."""
        for job in jobs:
            if job.parameters.k != k:
                raise ValueError(f"job {job.parameters.job_id} of {job.aggregation.label} has k = {job.parameters.k}; "
                                 f"the switches' programs are built for k = {k}")
        self.topology = topology
        self.target = target
        self.log_dir = log_dir
        self.k = k
        self.max_pool_size = max_pool_size
        self.all_jobs: tuple[Job, ...] = tuple(jobs)
        self.loaded: Aggregation = jobs[0].aggregation if jobs else methods.aggregation(lookup(target).default_protocol)
        """The protocol whose program the switches run."""
        try:
            self.servers: tuple[ServerHost, ...] = plan_servers(topology, self.all_jobs)
        except ServerPlanError as exc:
            raise NetworkError(str(exc)) from None
        if self.servers and cluster is not None:
            raise NetworkError("servers beside the workers (Aggregation.servers_per_job) run on one machine only, not on a cluster")
        self._server_processes: list[ServerProcess] = []
        self.fabric: Fabric | None = None
        self.requested_loss_mechanism = loss_mechanism
        self.tcp_congestion_control = tcp_congestion_control
        self.net: Mininet | None = None
        self._lock = NetworkLock()
        self._scratch: Path | None = None
        self.controls: dict[str, SwitchControl] = {}
        self.report: NetworkReport | None = None
        self.cluster_spec = cluster
        self.cluster: Cluster | None = None
        self._directories: list[str] = []

    # -- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> "EmulatedNetwork":
        self._lock.acquire()
        try:
            self._remove_leftovers()
            self._start()
        except Exception as symptom:
            died = self._died(EXIT_NOTICE_S)
            self.close()
            if died is not None:  # the cause; the error was its symptom
                raise died from symptom
            raise
        except BaseException:
            self.close()
            raise
        return self

    def _died(self, wait_s: float) -> DependencyExited | None:
        """A process of this network that has exited (waiting up to ``wait_s``), if one has."""
        if self.net is None:
            return None
        watched = Dependencies(self.dependencies())
        try:
            return watched.exited(wait_s)
        finally:
            watched.close()

    def _remove_leftovers(self) -> None:
        """What a killed run left (its record in the lock), and interfaces with our names."""
        previous = self._lock.previous
        if previous is not None:
            removed = remove_leftovers(previous)
            log.warning("the run with pid %d died holding the network; removed what it left: %s",
                        previous.pid, ", ".join(removed) or "nothing was left")
        nodes = "|".join(re.escape(n.name) for n in [*self.topology.hosts, *self.servers, *self.topology.switches])
        ours = re.compile(rf"^({nodes})-eth\d+$")
        stale = delete_interfaces([name for name in root_interfaces() if ours.match(name)])
        if stale:
            log.warning("deleted interfaces left by an earlier network (no record of whose): %s", ", ".join(stale))

    def declare_directory(self, path: Path) -> None:
        """Have ``path`` removed by the next run if this process dies while it holds the network
        (on every server: files are copied to the same paths on a cluster's others)."""
        self._lock.declare(directories=[str(path)])
        self._directories.append(str(path))
        self._declare_server_cleanup()

    def _declare_server_cleanup(self) -> None:
        if self.cluster is not None:
            self._lock.declare_commands([self.cluster.cleanup_argv(server, os.getpid(), self._directories)
                                         for server in self.cluster.servers])

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self) -> None:
        caps = probe_tc()
        loss_mechanism = self._choose_loss_mechanism(caps)
        delay_mechanism = self._choose_delay_mechanism(caps)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        switch_cls = lookup(self.target).node_class()
        self._scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
        self.declare_directory(self._scratch)
        # the switches' temporary files (control sockets) go into the scratch folder, which the lock records
        switch_options = {"log_dir": self.log_dir, "k": self.k, "max_pool_size": self.max_pool_size, "scratch_dir": self._scratch,
                          "protocol": self.loaded.name, "port_rate_bps": None if self.topology.link_mbps is None else mbps_to_bps(self.topology.link_mbps),
                          "port_queue_packets": self._port_queue_packets()}
        if delay_mechanism == "switch_delay_line":
            switch_options["link_delay_ms"] = self.topology.links[0].spec.delay_ms
        if self.cluster_spec is not None:
            cluster = Cluster.start(self.cluster_spec, self.topology, self._scratch / "ssh")
            try:
                preflight(cluster, self.target, [switch.name for switch in self.topology.switches], writes=[self.log_dir, self._scratch])
            except BaseException:
                cluster.close()  # nothing was started there
                raise
            self.cluster = cluster
            cluster.on_push = self._declare_server_cleanup
            self._declare_server_cleanup()
            log.info("cluster: %s", ", ".join(f"{n} on {s}" for n, s in sorted(self.cluster.placement.items())))
        net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False, autoStaticArp=False, waitConnected=False)
        self.net = net
        for host in [*self.topology.hosts, *self.servers]:
            own_shell(net.addHost(host.name, ip=f"{host.ipv4}/{self.topology.subnet.prefixlen}", mac=host.mac, **self._host_class(host.name)))
        for switch in self.topology.switches:
            own_shell(net.addSwitch(switch.name, **self._switch_class(switch.name, switch_cls), **switch_options))
        for link in self._links():
            net.addLink(link.a, link.b, **self._link_class(link.a, link.b))
        self._lock.declare(interfaces=self._interface_names(net))
        net.build()
        for node in [*net.hosts, *net.switches]:
            run = node_runner(node)
            for intf in node.intfList():
                if intf.name != "lo":
                    disable_offloads(run, intf.name)
                    silence_ipv6(run, intf.name)
        allow_congestion_control(self.tcp_congestion_control)
        for node in net.hosts:
            pin_congestion_control(node_runner(node), node.name, self.tcp_congestion_control)
        applied = self._shape(caps, loss_by_netem=loss_mechanism == "netem", delay_by_netem=delay_mechanism == "netem")
        net.start()
        self._static_arp()
        self.report = NetworkReport(
            target=self.target,
            tc_capabilities=caps.describe(),
            loss_mechanism=loss_mechanism,
            delay_mechanism=delay_mechanism,
            aggregation=self.topology.aggregation,
            tcp_congestion_control=self.tcp_congestion_control,
            links=[asdict(a) for a in applied],
            servers=dict(sorted(self.cluster.placement.items())) if self.cluster is not None else {},
        )
        self._program_fabric(loss_mechanism)

    def _links(self) -> list[LinkDef]:
        """The topology's links, and each server's to the aggregating switch (the workers' link)."""
        if not self.servers:
            return list(self.topology.links)
        spec = server_link(self.topology)
        return [*self.topology.links, *(LinkDef(server.name, self.topology.aggregator.name, spec) for server in self.servers)]

    def _host_class(self, name: str) -> dict[str, Any]:
        """Mininet's host here; cluster.py's remote host where the cluster places it elsewhere."""
        if self.is_local(name):
            return {"cls": Host}
        return {"cls": ClusterHost, "cluster": self.cluster}

    def _switch_class(self, name: str, node_class: type) -> dict[str, Any]:
        """The target's switch here; on another server, the same with its data plane started there."""
        if self.is_local(name):
            return {"cls": node_class}
        return {"cls": cluster_switch_class(node_class), "cluster": self.cluster}

    def _link_class(self, a: str, b: str) -> dict[str, Any]:
        """A veth within a server, a VXLAN pair between two."""
        if self.server_of(a) == self.server_of(b):
            return {"cls": Link}
        return {"cls": VxlanLink, "cluster": self.cluster}

    def close(self) -> None:
        """Stop everything this network started; safe to call twice. SIGINT and SIGTERM wait
        until it is done: a half-done teardown leaks namespaces, veths and processes."""
        with deferred_signals():
            self._close()

    def _close(self) -> None:
        self._stop_servers()
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
                    # Switch processes first, while their interfaces still exist.
                    for switch in net.switches:
                        switch.stop(deleteIntfs=False)
                finally:
                    for node in [*net.switches, *net.hosts]:
                        stop_shell(node)
                    self._delete_links(net)
        finally:
            if self.cluster is not None:
                cluster, self.cluster = self.cluster, None
                cluster.clean_servers(os.getpid(), self._directories)
                cluster.close()
            if self._scratch is not None:
                shutil.rmtree(self._scratch, ignore_errors=True)
                self._scratch = None
            self._lock.release()

    @staticmethod
    def _interface_names(net: Mininet) -> list[str]:
        return [intf.name for node in [*net.hosts, *net.switches] for intf in node.intfList() if intf.name != "lo"]

    def _delete_links(self, net: Mininet) -> None:
        """Delete every veth from its end in the root namespace (a switch's: deleting one end
        deletes the pair; a host's end goes with its namespace too), then check that none is
        left."""
        names = self._interface_names(net)
        delete_interfaces(names)
        left = sorted(set(names) & set(root_interfaces()))
        if left:
            raise NetworkError(f"interfaces could not be deleted: {', '.join(left)}")

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
        lossless = sorted({job.aggregation.label for job in self.all_jobs if not job.aggregation.drop_simulator})
        if lossless:
            raise NetworkError(f"link loss needs netem, which this kernel lacks, or the switch's drop simulator, which "
                               f"{' and '.join(lossless)}'s program has not: run it with --simulate, or on a kernel with sch_netem")
        return "switch_drop_simulator"

    def _choose_delay_mechanism(self, caps: TcCapabilities) -> str:
        """netem where the kernel has it; else the switch's delay line, if its target has one (the embedded switch's)."""
        delays = {l.spec.delay_ms for l in self.topology.links}
        if delays == {0.0}:
            return "none"
        if caps.netem:
            return "netem"
        if not lookup(self.target).delays_frames:
            choices = " or ".join(f"--switch {name}" for name in delay_line_targets())
            raise NetworkError(
                f"link delay needs netem, which this kernel lacks, and the {self.target} switch cannot delay frames; "
                f"use a switch with a delay line ({choices}) or a kernel with sch_netem"
            )
        if len(delays) > 1:
            raise NetworkError(f"links have different delays {sorted(delays)}; the switch's delay line applies one")
        return "switch_delay_line"

    def _port_queue_packets(self) -> int:
        """The deepest queue of a switch port's link, as ``_shape`` cuts it: what a virtual queue kept
        at the links' rate (``port_rate_bps``) holds at most."""
        return cut_queue(max(link.spec.queue_packets for link in self.topology.links), lookup(self.target).port_queue_limit())

    def _shape(self, caps: TcCapabilities, loss_by_netem: bool, delay_by_netem: bool) -> list[AppliedShaping]:
        assert self.net is not None
        port_queue_limit = lookup(self.target).port_queue_limit()
        if port_queue_limit is not None:
            log.info("switch ports' queues: at most %d packets (%s)", port_queue_limit.packets, port_queue_limit.why)
        applied = []
        for link in self._links():
            node_a, node_b = self.net.get(link.a), self.net.get(link.b)
            for node, other in ((node_a, node_b), (node_b, node_a)):
                intf, _ = node.connectionsTo(other)[0]
                limit = port_queue_limit if node in self.net.switches else None
                applied.append(shape_interface(node_runner(node), intf.name, link.spec, caps, loss_by_netem, delay_by_netem, limit))
        return applied

    def _static_arp(self) -> None:
        """Every host and server knows every other (the switch's address is the switch's business:
        ``_resolve_aggregator``)."""
        assert self.net is not None
        hosts = [*self.topology.hosts, *self.servers]
        entries = [(h.ipv4, h.mac) for h in hosts]
        for host in hosts:
            node = self.net.get(host.name)
            intf = node.defaultIntf().name
            run = node_runner(node)
            for ipv4, mac in entries:
                if ipv4 != host.ipv4:
                    code, out = run(["ip", "neigh", "replace", ipv4, "lladdr", mac, "dev", intf, "nud", "permanent"])
                    if code != 0:
                        raise NetworkError(f"{host.name}: static ARP entry {ipv4} -> {mac} failed: {out}")

    def _port_towards(self, switch: str, node: str) -> int:
        """The switch port on the path from ``switch`` to ``node`` (a server: by the aggregating switch)."""
        assert self.net is not None
        sw = self.net.get(switch)
        aggregator = self.topology.aggregator.name
        if any(server.name == node for server in self.servers):
            hop = self.net.get(node if switch == aggregator else self.topology.next_hop(switch, aggregator))
        else:
            hop = self.net.get(self.topology.next_hop(switch, node))
        intf, _ = sw.connectionsTo(hop)[0]
        return sw.ports[intf]

    def _fabric(self, loss_mechanism: str) -> Fabric:
        """What the switches' control plane needs of this network (switches/fabric.py)."""
        assert self.net is not None
        ports = {s.name: tuple(p for intf, p in self.net.get(s.name).ports.items() if intf.name != "lo") for s in self.topology.switches}
        servers = [Station(server.name, server.mac, server.ipv4) for server in self.servers]
        return topology_fabric(self.topology, self._port_towards, ports, loss_mechanism == "switch_drop_simulator", servers)

    def _program_fabric(self, loss_mechanism: str) -> None:
        self.fabric = self._fabric(loss_mechanism)
        self._program()

    @property
    def jobs(self) -> tuple[Job, ...]:
        """The jobs of the protocol whose program the switches run."""
        return tuple(job for job in self.all_jobs if job.aggregation.name == self.loaded.name)

    def _program(self) -> None:
        """Every switch programmed for the loaded protocol's jobs by its programmer, over new
        control connections (a switch's commands logged to ``<switch>.commands``)."""
        assert self.net is not None and self.fabric is not None
        if self.loaded.program_fabric is None:
            raise NetworkError(f"{self.loaded.label} has no switch programmer (Aggregation.program_fabric): it runs on no network")
        for switch in self.fabric.switches:
            self.controls[switch] = self.net.get(switch).control(self.log_dir / f"{switch}.commands")
        jobs = [FabricJob(job.parameters, job.hosts, tuple(s.name for s in self._job_servers(index)))
                for index, job in enumerate(self.jobs)]
        resolve(self.loaded.program_fabric)(self.controls, self.fabric, jobs)
        if self.loaded.switch_address:
            self._resolve_aggregator()
        else:
            self._pin_aggregator()

    def prepare(self, method: Method) -> None:
        """What ``method`` needs of the network before its first job here: its protocol's
        program on every switch (loaded and programmed where another protocol's runs), and
        its state zeroed on every aggregating switch (the workers start from an empty pool).
        Nothing for a method with no switch job: whichever program runs forwards its traffic."""
        aggregation = method.aggregation
        if aggregation is None:
            return
        if aggregation.name != self.loaded.name:
            if not any(job.aggregation.name == aggregation.name for job in self.all_jobs):
                raise NetworkError(f"method {method.name}: the network was built with no job of {aggregation.label}")
            self._load(aggregation)
        aggregation.reset(self.aggregating_controls, self.jobs[0].parameters)

    def _load(self, aggregation: Aggregation) -> None:
        """Every switch restarted with ``aggregation``'s program, and programmed for its jobs."""
        assert self.net is not None
        log.info("loading %s's program on every switch", aggregation.label)
        self._stop_servers()
        for control in self.controls.values():
            control.close()
        self.controls.clear()
        self.loaded = aggregation
        for switch in self.net.switches:
            switch.load(aggregation.name)
        self._program()

    def _job_servers(self, index: int) -> list[ServerHost]:
        """The servers of the loaded protocol's job ``index`` (its position in ``jobs``)."""
        job = self.jobs[index]
        return [server for server in self.servers if self.all_jobs[server.job] is job]

    def server_addresses(self, index: int) -> tuple[str, ...]:
        """The IPv4 addresses of the servers of the loaded protocol's job ``index`` (its
        position in ``jobs``), in order: what its workers' spec gives them (``servers``)."""
        return tuple(server.ipv4 for server in self._job_servers(index))

    @contextlib.contextmanager
    def serving(self, spec_paths: Mapping[int, Path]) -> Iterator[list[ServerProcess]]:
        """The loaded protocol's server (``Aggregation.server``) on each server host of the
        jobs ``spec_paths`` names (a job's position in ``jobs`` -> its workers' spec), each run
        with its job's spec and serving, while held; each server's death is one of the network's
        ``dependencies`` meanwhile. Nothing for a protocol without servers."""
        assert self.net is not None
        unknown = sorted(set(spec_paths) - set(range(len(self.jobs))))
        if unknown:
            raise ValueError(f"{len(self.jobs)} job(s) of {self.loaded.label} run here; no job at position(s) {unknown}")
        reference = self.loaded.server
        if self.loaded.servers_per_job and reference is None:
            raise NetworkError(f"{self.loaded.label} asks for servers but names no server to run on them (Aggregation.server)")
        started: list[ServerProcess] = []
        try:
            for index, spec_path in spec_paths.items():
                for server in self._job_servers(index):
                    started.append(ServerProcess(self.net.get(server.name), server, reference, spec_path, self.log_dir))
                    self._server_processes.append(started[-1])
            try:
                for process in started:
                    process.wait_serving()
            except ServerError as exc:
                raise NetworkError(str(exc)) from None
            yield started
        finally:
            for process in started:
                process.stop()
                self._server_processes.remove(process)

    def server_counts(self) -> list[dict[str, int]]:
        """Every running server's counts so far (its protocol's ``Server.counts``), in the order
        they were started: job by job, each job's in its spec's ``servers`` order."""
        try:
            return [process.counts() for process in self._server_processes]
        except ServerError as exc:
            raise NetworkError(str(exc)) from None

    def job_index(self, hosts: Sequence[str]) -> int | None:
        """The position in ``jobs`` of the loaded protocol's job on exactly ``hosts``; None: no such job."""
        return next((index for index, job in enumerate(self.jobs) if set(job.hosts) == set(hosts)), None)

    def _stop_servers(self) -> None:
        while self._server_processes:
            self._server_processes.pop().stop()

    def _pin_aggregator(self) -> None:
        """Every host and server gets a static neighbour entry for the aggregator's virtual
        address, for a program that answers no ARP (``Aggregation.switch_address`` False)."""
        assert self.net is not None
        for host in [*self.topology.hosts, *self.servers]:
            node = self.net.get(host.name)
            code, out = node_runner(node)(["ip", "neigh", "replace", self.topology.aggregator_ipv4, "lladdr", self.topology.aggregator_mac,
                                           "dev", node.defaultIntf().name, "nud", "permanent"])
            if code != 0:
                raise NetworkError(f"{host.name}: static ARP entry for the switch's address {self.topology.aggregator_ipv4} failed: {out}")

    def _resolve_aggregator(self) -> None:
        """Every host resolves the aggregator's virtual address by ARP (the switch answers
        it) and pings it once: a worker's first burst then finds the neighbour resolved
        instead of overflowing the kernel's queue of packets waiting for it, and a switch
        that does not answer fails the run here, naming the host."""
        assert self.net is not None
        for host in self.topology.hosts:
            code, out = node_runner(self.net.get(host.name))(RESOLVE_AGGREGATOR + [self.topology.aggregator_ipv4])
            if code != 0:
                raise NetworkError(f"{host.name}: the switch's address {self.topology.aggregator_ipv4} does not answer ARP and ping: {out}")

    @property
    def aggregating_controls(self) -> list[SwitchControl]:
        """The switches that hold aggregation state: the aggregator, and in hierarchical
        aggregation every leaf with workers."""
        assert self.fabric is not None
        return [self.controls[name] for name in self.fabric.aggregating()]

    def waited_for(self) -> dict[str, str]:
        """Host -> what the network shows of why the other hosts wait for it (a link that is
        down, the aggregating switch's slots waiting for its updates: switches/switchml/evidence.py, its record's waiting_evidence);
        asked at a deadline that passed with no process stopped."""
        assert self.net is not None and self.fabric is not None
        found: dict[str, list[str]] = {}
        for host in self.topology.hosts:
            own = self.net.get(host.name).defaultIntf()
            link = own.link
            if link is None:
                continue
            switch_end = link.intf2 if link.intf1 is own else link.intf1
            if self._where(switch_end.node.name) == "" and carrier_lost(switch_end.name):
                found.setdefault(host.name, []).append(f"its link is down ({switch_end.name}, the switch's end of {own.name}, has no carrier)")
        if not self.fabric.hierarchical and len(self.jobs) <= 1 and self.loaded.waiting_evidence is not None:
            aggregator = self.fabric.aggregator.name
            evidence = resolve(self.loaded.waiting_evidence)
            for rank, what in evidence(self.controls[aggregator], aggregator, len(self.topology.hosts)).items():
                found.setdefault(self.topology.hosts[rank].name, []).append(what)
        return {host: "; ".join(what) for host, what in found.items()}

    def switch_problems(self) -> list[str]:
        """What is wrong with a running switch that no process's death shows (its eBPF
        program detached from a port: ``DataPlane.problems``); asked at a deadline that passed,
        before a rank is blamed from the switch's frozen slots."""
        assert self.net is not None
        return [f"switch {switch.name}: {problem}" for switch in self.net.switches for problem in switch.data_plane_problems()]

    # -- access ------------------------------------------------------------------------

    def host(self, name: str) -> Host:
        assert self.net is not None
        return self.net.get(name)

    @property
    def aggregator_control(self) -> SwitchControl:
        return self.controls[self.topology.aggregator.name]

    def dependencies(self) -> dict[str, Dependency]:
        """What each process this network's workers depend on is -> its pid: every node's
        shell (a command on a node goes through it) and every switch's process; and the
        threads of this process a switch needs (bmv2's learning controller) -> their watches."""
        assert self.net is not None
        shells = {f"the shell of {'host' if node in self.net.hosts else 'switch'} {node.name}{self._where(node.name)}": node.shell.pid
                  for node in [*self.net.hosts, *self.net.switches] if node.shell is not None}
        threads = {label: watch for sw in self.net.switches for label, watch in sw.switch_threads.items()}
        servers = {f"server {process.server.name}": process.process.pid for process in self._server_processes}
        return shells | {f"switch {name}": pid for name, pid in self.switch_processes().items()} | threads | servers

    def _where(self, node: str) -> str:
        """Where a node on another server runs, for messages: its shell there is an ssh
        connection, which a dropped connection ends too."""
        if self.is_local(node):
            return ""
        return f" on server {self.server_of(node)} (its ssh connection)"

    def switch_server_shell(self, switch: str) -> Callable[[str], str] | None:
        """For a switch on another server, what runs a shell command there and returns its
        output (its ports' counters are read there); None for a switch on this machine."""
        if self.is_local(switch):
            return None
        return self.server_shells()[self.server_of(switch)]

    def remote_host_shells(self) -> dict[str, tuple[str, Callable[[str], str]]]:
        """Host name -> (its server, ``server_shells``' runner there), for the hosts on another server."""
        assert self.net is not None
        shells = self.server_shells()
        return {h.name: (self.server_of(h.name), shells[self.server_of(h.name)]) for h in self.net.hosts if not self.is_local(h.name)}

    def server_shells(self) -> dict[str, Callable[[str], str]]:
        """Per other server of the cluster, what runs a shell command there and returns its
        output (empty on one machine)."""
        if self.cluster is None:
            return {}
        cluster = self.cluster

        def shell(server: str) -> Callable[[str], str]:
            return lambda command: cluster.check(server, command, f"running {command!r}")

        return {server: shell(server) for server in cluster.servers}

    def server_of(self, node: str) -> str:
        """The server ``node`` runs on (``LOCAL``: this machine)."""
        return LOCAL if self.cluster is None else self.cluster.server_of(node)

    def is_local(self, node: str) -> bool:
        """Whether ``node`` runs on this machine (always, without a cluster)."""
        return self.server_of(node) == LOCAL

    def measured_switch_processes(self) -> dict[str, tuple[str, int]]:
        """Switch name -> (its server, the pid there) of the process doing its switching,
        whose CPU share is measured on that server (a switch on another server: its agent's
        report, not the ssh connection ``switch_processes`` watches)."""
        assert self.net is not None
        return {sw.name: (self.server_of(sw.name), sw.switch_pid_on_server) for sw in self.net.switches
                if sw.switch_pid_on_server is not None}

    def switch_processes(self) -> dict[str, int]:
        """Switch name -> pid of this machine's child process that does its switching, or
        carries it from another server: what the workers depend on. An eBPF switch has none (switch_pid None): it lives
        as long as its ports, and its work is softirq time, which the machine's busy share counts."""
        assert self.net is not None
        return {sw.name: sw.switch_pid for sw in self.net.switches if sw.switch_pid is not None}

    def describe(self) -> dict[str, Any]:
        """The report for the results; ``servers`` only with a cluster, so that a run on one
        machine writes what it always wrote, and ``server_hosts`` only for jobs that have some."""
        assert self.report is not None
        described = asdict(self.report)
        if not described["servers"]:
            del described["servers"]
        if self.servers:  # as the simulated network records them (simulation/network.py)
            described["server_hosts"] = {s.name: {"ipv4": s.ipv4, "mac": s.mac, "cabled_to": self.topology.aggregator.name} for s in self.servers}
        return described

