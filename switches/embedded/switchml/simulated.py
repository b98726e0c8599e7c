"""The embedded switch as a ``SimulatedSwitch`` (switches/target.py): its pipeline, fed
frames by the simulator instead of by AF_PACKET sockets.

``SwitchMLPipeline.process`` is already free of I/O (pipeline.py), so the simulated switch
is the emulated one's exact code: each frame is copied into the pipeline's buffer and
processed, and leaves through the transmit function the simulator connected to its port.
Its control plane is the control socket's handlers (control_server.py), called in process.

``aggregation_path`` and ``take_back`` hand a compiled event loop (simulation/switchml/native/star.c)
the part of the program a star's workers exercise, SwitchMLIngress steps 3-6 without an
uplink, the traffic manager's group and SwitchMLEgress's result headers, as arrays, and
take its registers and counters back; tests/test_native_star.py holds the two equal.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import numpy as np

from protocol.switchml.packet import frame_bytes, SWITCHML_OFFSET
from switches.control import SwitchControl
from switches.embedded.control_server import pipeline_handlers
from switches.embedded.parser import IPV4_SRC_ADDR, UDP_LENGTH
from switches.embedded.switchml.pipeline import SwitchMLPipeline
from switches.remote_control import InProcessControl
from switches.target import Transmit


class PipelineSwitch:
    """One embedded switch in a simulation."""

    def __init__(self, *, k: int, max_pool_size: int, seed: int | None = None) -> None:
        self.pipeline = SwitchMLPipeline(k, max_pool_size, seed)
        self._frame = self.pipeline.packet.frame
        self._process = self.pipeline.process

    def connect(self, port: int, transmit: Transmit) -> None:
        self.pipeline.ports[port] = transmit

    def receive(self, port: int, frame: bytes) -> None:
        length = len(frame)
        self._frame[:length] = frame
        self._process(port, length)

    def stats(self) -> dict:
        """What the control socket's ``stats`` reports: a simulated port loses nothing inside the switch."""
        return {"rx_drops": {str(port): 0 for port in self.pipeline.ports}, "tx_errors": self.pipeline.tx_errors}

    def control(self, command_log: Path | None = None) -> SwitchControl:
        return InProcessControl(pipeline_handlers(self.pipeline, self.stats), command_log)

    def aggregation_path(self, headers: Mapping[int, bytes]) -> dict[str, np.ndarray | int]:
        """What star.c needs to run this pipeline for frames from ``headers`` (port -> the
        Ethernet/IPv4/UDP headers the host on it sends, SwitchML updates to this switch):
        the registers and counters as arrays (the value registers in place; ``take_back``
        writes the rest back), each port's worker_table entry (``set_worker`` 1, or 0 for
        its default, drop), the job's multicast group, and SwitchMLEgress's result headers
        for each (port, rank). RuntimeError names what of the program is not on that path
        (a drop simulator, an uplink, an ordinary-forwarding entry, several groups)."""
        pipeline = self.pipeline
        ingress, egress, k = pipeline.ingress, pipeline.egress, pipeline.ingress.k
        if ingress.ingress_drop_threshold.cells[0] or egress.egress_drop_threshold.cells[0]:
            raise RuntimeError("the aggregation path runs no drop simulator; this switch has one programmed")
        if ingress.uplink_table.entries:
            raise RuntimeError("the aggregation path is a star's; this switch has an uplink (uplink_table)")
        n_ports = max(headers)
        arrays: dict[str, np.ndarray | int] = {name: np.zeros(n_ports + 1, dtype=np.int32) for name in
                                               ("set_worker", "rank", "job_id", "num_workers", "mcast_grp", "slot_base", "pool_size")}
        in_headers = np.zeros((n_ports + 1, SWITCHML_OFFSET), dtype=np.uint8)
        groups = set()
        for port, header in headers.items():
            frame = bytearray(header + bytes(frame_bytes(k) - SWITCHML_OFFSET))
            hdr = pipeline.parser.parse(frame, len(frame))
            if not hdr or hdr[UDP_LENGTH] != ingress.udp_length:
                raise RuntimeError(f"port {port}: its host's frames are not SwitchML updates of k = {k}")
            in_headers[port] = np.frombuffer(header, dtype=np.uint8)
            action, action_params = ingress.worker_table.entries.get((port, hdr[IPV4_SRC_ADDR]), ingress.worker_table.default)
            if action == "set_worker":
                arrays["set_worker"][port] = 1
                for name, value in zip(("rank", "job_id", "num_workers", "mcast_grp", "slot_base", "pool_size"), action_params):
                    arrays[name][port] = value
                groups.add(action_params[3])
            elif action != "drop_unknown_sender":
                raise RuntimeError(f"port {port}: worker_table action {action} is not on the aggregation path")
        if len(groups) > 1:
            raise RuntimeError(f"the aggregation path multicasts to one job's group; the worker table names {sorted(groups)}")
        replicas = pipeline.traffic_manager.replicas(groups.pop()) if groups else ()
        max_rank = max([rid + 1 for rid, _ in replicas] + [int(arrays["rank"].max()) + 1])
        result_headers = np.zeros((n_ports + 1, max_rank, SWITCHML_OFFSET), dtype=np.uint8)
        result_ok = np.zeros((n_ports + 1, max_rank), dtype=np.uint8)
        for port in headers:
            for rank in range(max_rank if arrays["set_worker"][port] else 0):
                result = egress.result_headers(in_headers[port].tobytes(), int(arrays["job_id"][port]), rank)
                if result is not None:
                    result_headers[port, rank] = np.frombuffer(result, dtype=np.uint8)
                    result_ok[port, rank] = 1
        arrays.update(
            k=k, max_pool_size=ingress.max_pool_size, frame_bytes=frame_bytes(k), n_replicas=len(replicas), max_rank=max_rank,
            values=ingress.values.matrix, in_headers=in_headers, result_headers=result_headers, result_ok=result_ok,
            replica_rid=np.array([rid for rid, _ in replicas], dtype=np.int32),
            replica_port=np.array([port for _, port in replicas], dtype=np.int32),
            bitmap=np.array(ingress.bitmap.cells, dtype=np.uint32), count=np.array(ingress.count.cells, dtype=np.uint32),
            seq=np.array(ingress.seq.cells, dtype=np.uint32), exponent=np.array(ingress.exponent.cells, dtype=np.int32),
            event_packets=np.array(ingress.event_counter.packets, dtype=np.int64),
            event_bytes=np.array(ingress.event_counter.bytes, dtype=np.int64),
            egress_packets=np.array(egress.egress_counter.packets, dtype=np.int64),
            egress_bytes=np.array(egress.egress_counter.bytes, dtype=np.int64),
        )  # fmt: skip
        return arrays

    def take_back(self, arrays: Mapping[str, np.ndarray]) -> None:
        """The registers and counters ``aggregation_path`` handed out, as the loop left them."""
        ingress, egress = self.pipeline.ingress, self.pipeline.egress
        for cells, name in ((ingress.bitmap.cells, "bitmap"), (ingress.count.cells, "count"), (ingress.seq.cells, "seq"),
                            (ingress.exponent.cells, "exponent"), (ingress.event_counter.packets, "event_packets"),
                            (ingress.event_counter.bytes, "event_bytes"), (egress.egress_counter.packets, "egress_packets"),
                            (egress.egress_counter.bytes, "egress_bytes")):
            cells[:] = arrays[name].tolist()
