"""One ATP job as a network runs it, on ATP's own ports, inside a network namespace of its own.

    unshare -n sh -c 'ip link set lo up && exec python -m tests.atp_netns_job SPEC.json OUT.json'

The worker is what ``hosts.allreduce.build(spec, 0)`` builds from the spec (ATP's record's
``host``: it binds ``WORKER_UDP_PORT`` on every address and sends to the spec's ``servers[0]``);
the PS is ATP's server entry point as a process (``python -m hosts.atp.server``), on
``PS_UDP_PORT``. Their fixed ports are why this runs in a namespace of its own. The embedded
pipeline relays between them (tests/atp_relay.py), owning the addresses the spec gives the
PS (``servers[0]``) and the switch (``switch_ipv4``); the PS itself is at ``PS_BIND``. One
worker: two would both bind ``WORKER_UDP_PORT`` in the one namespace. Writes the worker's
outcome and the PS's statistics to OUT.json.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from hosts.allreduce import build
from protocol.atp import params
from protocol.atp.quantize import expected_sum
from protocol.params import REPO_ROOT
from protocol.worker_spec import WorkerSpec
from tests.atp_relay import RelayJob, UDPRelay, wait_bound

PS_BIND = "127.0.0.3"
WORKER = ("127.0.0.1", params.WORKER_UDP_PORT)
"""Where the worker's results go: its socket on every address, reached on loopback."""


def main(spec_path: Path, out: Path) -> int:
    spec = WorkerSpec.read(spec_path)
    parameters = spec.protocol
    stats_path = out.with_suffix(".ps.json")
    relay = UDPRelay(parameters["k"], parameters["pool_size"], ps_face_address=(spec.servers[0], params.PS_UDP_PORT),
                     switch_face_address=(spec.switch_ipv4, params.SWITCH_UDP_PORT))
    server = subprocess.Popen([sys.executable, "-m", "hosts.atp.server", str(spec_path), "--bind", PS_BIND, "--stats", str(stats_path)],
                              cwd=REPO_ROOT)
    try:
        with relay:
            relay.add_job(RelayJob(parameters["job_id"], [WORKER], (PS_BIND, params.PS_UDP_PORT)))
            wait_bound(PS_BIND, params.PS_UDP_PORT, server)
            method = build(spec, 0)
            try:
                tensor = np.linspace(-1, 1, 1000, dtype=np.float32)
                values, int_sum, stats = method.allreduce(tensor)
            finally:
                method.close()
    finally:
        server.send_signal(signal.SIGTERM)
        status = server.wait(timeout=10)
    want = expected_sum([tensor], 1, parameters["exponent"])
    out.write_text(json.dumps({"exact": bool(np.array_equal(int_sum, want.int_sum) and np.array_equal(values, want.values)),
                               "packets_sent": stats.packets_sent, "server_status": status,
                               "ps": json.loads(stats_path.read_text())}))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
