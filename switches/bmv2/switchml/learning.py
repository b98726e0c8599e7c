"""The L2 learning controller for bmv2: answers the ``l2_learn`` digests of p4/switchml.p4.

SwitchMLIngress sends a digest ``{srcAddr, ingress_port, packet_length}`` for every frame
whose source MAC is not in ``l2_learn_table`` (docs/dataplane.md, step 2). bmv2 publishes
digests on a nanomsg socket and does nothing else with them: without a controller every
unicast frame of ordinary traffic (ARP, the ring's and the parameter server's TCP) is
flooded forever. This controller does what the embedded switch does inside its pipeline:
it adds the source to ``l2_learn_table`` (NoAction, so the digest stops) and, unless the
MAC is known already, an ``l2_table`` entry that forwards to the port it was seen on; when
either table is full (its size is the P4 program's, as on every target) it counts the
frame in the event counter's ``EV_L2_NOT_LEARNED`` cell instead, with the frame's length:
bmv2's data plane cannot know that a table is full. Then it acknowledges the digest
buffer, as bmv2's learning engine expects. bmv2 would otherwise collect samples for up to
a few hundred milliseconds before publishing them, while the embedded switch learns at
once; the controller sets the learn list's buffer to one sample,
so a reply that follows the first frame of a conversation is already unicast.

Entries go through the same control-plane interface as everything else (its own Thrift
connection, because the runner's is used from another thread).

Wire format of a learning notification (bmv2's learn engine, little-endian header):
topic ``LEA|``, switch id (u64), context id (i32), list id (i32), buffer id (u64), sample
count (i32), then the samples, each field of ``l2_learn_digest_t`` rounded up to whole
bytes in network order: srcAddr (6 bytes), ingress_port (2 bytes), packet_length (4 bytes).
"""

from __future__ import annotations

import json
import logging
import struct
import threading
from pathlib import Path
from typing import Iterator

from base.lifetime import ThreadWatch
from protocol.switchml import params
from switches.bmv2.control import Bmv2Control
from switches.control import ControlPlaneError, DuplicateEntryError, TableFullError

log = logging.getLogger(__name__)

L2_LEARN_TABLE = "SwitchMLIngress.l2_learn_table"
L2_TABLE = "SwitchMLIngress.l2_table"
EVENT_COUNTER = "SwitchMLIngress.event_counter"
EV_L2_NOT_LEARNED = params.P4_CONSTANTS["EV_L2_NOT_LEARNED"]
LEARN_LIST = "l2_learn_digest_t"
"""The digest's name in the compiled program's ``learn_lists``."""
LEARN_TOPIC = b"LEA|"
NOTIFICATION_HEADER = struct.Struct("<4sQiiQi")
"""topic, switch id, context id, list id, buffer id, number of samples."""
L2_LEARN_SAMPLE = struct.Struct("!6sHI")
"""l2_learn_digest_t: srcAddr (bit<48>), ingress_port (bit<9> in two bytes), packet_length (bit<32>)."""
POLL_S = 0.2
"""How often the thread looks up from the socket to see whether it should stop."""
STOP_TIMEOUT_S = 5.0
"""A Thrift call to a switch that hangs must not hang the teardown: the thread is a daemon."""


def parse_learning_notification(message: bytes) -> tuple[tuple[int, int, int], list[tuple[str, int, int]]] | None:
    """((context id, list id, buffer id), [(MAC, port, frame length), ...]) of a learning
    message; None for any other notification (ageing, port status); ValueError if it is cut short."""
    if len(message) < NOTIFICATION_HEADER.size or not message.startswith(LEARN_TOPIC):
        return None
    _topic, _switch, context_id, list_id, buffer_id, count = NOTIFICATION_HEADER.unpack_from(message)
    expected = NOTIFICATION_HEADER.size + count * L2_LEARN_SAMPLE.size
    if len(message) != expected:
        raise ValueError(f"learning notification of {len(message)} bytes, expected {expected} for {count} samples")
    samples = []
    for offset in range(NOTIFICATION_HEADER.size, expected, L2_LEARN_SAMPLE.size):
        mac, port, length = L2_LEARN_SAMPLE.unpack_from(message, offset)
        samples.append((":".join(f"{b:02x}" for b in mac), port, length))
    return (context_id, list_id, buffer_id), samples


def learn_list_id(json_path: Path) -> int:
    """bmv2's id of the l2_learn digest, from the compiled program."""
    lists = {entry["name"]: entry["id"] for entry in json.loads(json_path.read_text()).get("learn_lists", [])}
    if LEARN_LIST not in lists:
        raise ValueError(f"{json_path}: no learn list {LEARN_LIST!r} (found: {', '.join(lists) or 'none'})")
    return lists[LEARN_LIST]


class L2LearningController:
    """A thread subscribed to one simple_switch's notifications; ``stop()`` ends it."""

    def __init__(self, name: str, notifications_addr: str, thrift_port: int, json_path: Path) -> None:
        import pynng

        self.name = name
        self.learned = 0
        self.not_learned = 0
        self._control = Bmv2Control(thrift_port, json_path=json_path)
        self._control.learning_set_buffer_size(learn_list_id(json_path), 1)
        self._socket = pynng.Sub0(dial=notifications_addr, recv_timeout=int(POLL_S * 1000))
        self._socket.subscribe(LEARN_TOPIC)
        self._timeout = pynng.Timeout
        self._stopping = threading.Event()
        self.watch = ThreadWatch()
        """Readable once the thread has ended, whatever ended it (the run watches it: base.lifetime)."""
        self._thread = threading.Thread(target=self._run, name=f"{name}-l2-learning", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("%s: L2 learning controller listening for l2_learn digests", self.name)

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join(STOP_TIMEOUT_S)
        if self._thread.is_alive():
            log.warning("%s: L2 learning controller still busy after %.0f s; leaving it behind", self.name, STOP_TIMEOUT_S)
        self._socket.close()
        self._control.close()
        self.watch.close()
        log.info("%s: L2 learning controller stopped (%d addresses learned, %d frames not learned: a table was full)",
                 self.name, self.learned, self.not_learned)

    def _messages(self) -> Iterator[bytes]:
        while not self._stopping.is_set():
            try:
                yield self._socket.recv()
            except self._timeout:
                continue

    def _run(self) -> None:
        """The thread: the run learns of its end from ``watch``; the error is logged in one line
        (left to the thread, it would be a traceback on the runner's terminal)."""
        try:
            with self.watch.running():
                self._answer_digests()
        except Exception as error:
            log.error("%s: L2 learning controller ended: %s: %s", self.name, type(error).__name__, error)

    def _answer_digests(self) -> None:
        for message in self._messages():
            try:
                parsed = parse_learning_notification(message)
                if parsed is None:
                    continue
                buffer, samples = parsed
                for mac, port, length in samples:
                    self._learn(mac, port, length)
                self._control.learning_ack_buffer(*buffer)
            except (ValueError, ControlPlaneError) as error:
                if self._stopping.is_set():  # the switch went first; nothing left to program
                    return
                log.warning("%s: learning digest not handled: %s", self.name, error)

    def _learn(self, mac: str, port: int, length: int) -> None:
        """What the embedded switch's ``SwitchMLIngress._learn`` does, over Thrift."""
        log.debug("%s: l2_learn %s on port %d", self.name, mac, port)
        try:
            self._control.table_add(L2_LEARN_TABLE, "NoAction", [mac], [])
        except DuplicateEntryError:
            return  # learned already: the same sample in a digest sent before our ack arrived
        except TableFullError:
            self._not_learned(length)
            return
        try:
            self._control.table_add(L2_TABLE, "l2_forward", [mac], [port])
        except DuplicateEntryError:
            pass  # a static entry (program_forwarding) wins, as in the embedded switch
        except TableFullError:
            self._not_learned(length)
            return
        self.learned += 1

    def _not_learned(self, length: int) -> None:
        """A full table took nothing: count the frame, where the data plane counts its events."""
        self._control.counter_add(EVENT_COUNTER, EV_L2_NOT_LEARNED, length)
        self.not_learned += 1
