"""A switch target run on a cluster's other server, and its control plane served from there.

    python -m switches.agent --target T --name S --socket PATH --log-dir DIR --k K --max-pool-size M \
        --port=1=s2-eth1 ... [--options JSON]

(``--options``: the target's own options and ``protocol``, whose program it runs.)

The controlling machine starts this over ssh on the server a switch node is placed on
(network/cluster.py): it starts the target's data plane there on the node's ports
(``SwitchTarget.data_plane``, as a Mininet node would: the embedded switch's process,
bmv2's simple_switch, the eBPF program and its maps), opens its control plane there (an eBPF
switch's maps are programmed by bpf() calls, which only a process on that server can
make), and serves the control-plane primitives on a Unix socket in the target-neutral
JSON-lines protocol of switches/remote_control.py, so the controlling machine's
``SocketControl`` programs any target through the socket ssh forwards. It prints
``ready PID`` (its switch process's pid, ``-`` for none) when the socket listens, and stops the data plane and exits when its standard
input closes -- the ssh connection it came over is gone -- or on SIGTERM; when the switch
or a thread it needs here (bmv2's learning controller) dies under it, it exits with status 3, which ends that connection: the run, watching it,
names the switch.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any, Callable

from base.lifetime import Dependencies
from switches.remote_control import handle_request, primitive_handlers
from switches.targets import lookup

log = logging.getLogger("switches.agent")

WATCH_S = 0.2
"""How often the agent checks that its switch still runs."""
SWITCH_DIED = 3
"""The agent's exit status when its switch died under it."""
def serve(listener: socket.socket, served: dict[str, Callable[..., Any]], lock: threading.Lock) -> None:
    """Every connection in its own thread, one request at a time across them."""
    while True:
        connection, _ = listener.accept()
        threading.Thread(target=_connection, args=(connection, served, lock), daemon=True).start()


def _connection(connection: socket.socket, served: dict[str, Callable[..., Any]], lock: threading.Lock) -> None:
    with connection, connection.makefile("rb") as lines:
        for line in lines:
            with lock:
                response = handle_request(served, line)
            connection.sendall(json.dumps(response).encode() + b"\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m switches.agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--socket", type=Path, required=True)
    parser.add_argument("--log-dir", type=Path, required=True)
    parser.add_argument("--k", type=int, required=True)
    parser.add_argument("--max-pool-size", type=int, required=True)
    parser.add_argument("--port", action="append", default=[], help="NUMBER=INTERFACE")
    parser.add_argument("--options", default="{}", help="the target's own options, as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s agent {args.name} %(name)s %(levelname)s %(message)s")
    ports = {int(number): interface for number, interface in (p.split("=", 1) for p in args.port)}
    target = lookup(args.target)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    options = json.loads(args.options)
    data_plane = target.data_plane(ports, args.log_dir, name=args.name, k=args.k, max_pool_size=args.max_pool_size,
                                   protocol=options.pop("protocol", None), **target.start_options(options))
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    data_plane.start()
    try:
        control = data_plane.control()
        args.socket.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(args.socket))
        listener.listen()
        threading.Thread(target=serve, args=(listener, primitive_handlers(control), threading.Lock()), daemon=True).start()
        threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
        print("ready", data_plane.pid if data_plane.pid is not None else "-", flush=True)
        threads = Dependencies(data_plane.threads)
        while not done.wait(WATCH_S):
            ended = threads.exited()
            if not data_plane.running or ended is not None:  # so the agent dies too, which the controlling machine watches
                log.error("switch %s stopped running%s", args.name, f": {ended}" if ended is not None else "")
                return SWITCH_DIED
        log.info("stopping (its connection closed, or SIGTERM)")
        listener.close()
        control.close()
    finally:
        data_plane.stop()
        args.socket.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
