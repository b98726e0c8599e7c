"""SwitchML's worker on the simulated clock, built from the worker spec as a host builds its
client (hosts/switchml/spec.py, shared with hosts/switchml/method.py): the same job parameters, retransmission policy and
deadline, under simulation/switchml/worker.py's driver, which simulation/switchml/native/star.c mirrors event
for event (so SwitchML gives its own driver rather than the generic one: methods/switchml.py,
``simulated_host``)."""

from __future__ import annotations

import simpy

from hosts.switchml.spec import retransmit_policy, spec_parameters
from protocol.worker_spec import WorkerSpec
from simulation.switchml.worker import SimulatedWorker, WorkerSetup
from switches.fabric import Station


def simulated_worker(env: simpy.Environment, spec: WorkerSpec, rank: int, host: Station, switch: Station,
                     packet_cost_s: float = 0.0) -> SimulatedWorker:
    """Rank ``rank`` of the spec's SwitchML job on ``host``, sending to ``switch``'s aggregation port."""
    job = spec_parameters(spec)
    setup = WorkerSetup(rank, spec.n_workers, job.job_id, job.k, job.pool_size, retransmit_policy(job, spec.link_mbps),
                        spec.job_timeout_s, packet_cost_s)
    return SimulatedWorker.at(env, setup, host, switch)
