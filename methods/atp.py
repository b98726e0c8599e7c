"""ATP (Lao et al., NSDI'21): jobs share one pool of switch aggregators; a parameter server
per job finishes what the switch could not sum (hosts/atp/, docs/dataplane-atp.md).

Its bound is a line rate, as SwitchML's: each worker sends every chunk of k elements once
and receives its result once, each in one frame of ``protocol.atp.packet.frame_bytes(k)``
bytes (3 more than SwitchML's at the same k: a 16-byte header against 13). The parameter
server's link carries one full sum in and one result out per chunk, as much as a worker's,
so it binds no earlier. Preamble and inter-frame gap are not counted (htb shapes frame
bytes). Below the bound: the window (W packets in flight, halved under ECN), collisions and
partial sums, which cost the PS's link an extra frame each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from methods import verification
from methods.aggregation import Aggregation
from methods.method import BITS_PER_BYTE, in_network, require_positive
from protocol.atp import params
from protocol.atp.job import SECTION, ATPParameters
from protocol.atp.packet import frame_bytes
from protocol.atp.quantize import expected_sum
from protocol.atp.params import K_CHOICES
from protocol.quantize import PROTOCOL_BITS, ExpectedSum

NAME = "atp"

DEFAULTS: dict[str, Any] = {
    "exponent": 8,
    "resend_timeout_ms": 5.0,
    "congestion_control": True,
    "ecn_threshold": params.DEFAULT_ECN_THRESHOLD,
}
"""``protocol.atp`` where a config leaves it out; ``window`` left out is the smaller of
protocol/atp/params.py's DEFAULT_WINDOW and the pool (ATPParameters.from_config), so a config
with a small pool runs ATP without naming it. The exponent bounds |x| by 2^8 = 256, beyond
the synthetic workloads' values and a gradient's; the resend timeout is hosts/atp/worker.py's."""

PROPERTIES: dict[str, Any] = {
    SECTION: {
        "type": "object",
        "additionalProperties": False,
        "description": "ATP's own parameters (methods/atp.py); k, pool_size (the shared pool of aggregators its positions hash into) and job_id are the section's",
        "properties": {
            "window": {"type": "integer", "minimum": 1, "maximum": params.MAX_POOL_SIZE,
                       "description": f"W: the positions a worker cycles through and the most packets it has in flight (at most pool_size; default the smaller of {params.DEFAULT_WINDOW} and pool_size)"},
            "exponent": {"type": "integer", "minimum": -128, "maximum": 127,
                         "description": "2^exponent bounds |x| over the job: the one scale every worker quantizes with (protocol/atp/quantize.py); a larger value is refused, naming it"},
            "resend_timeout_ms": {"type": "number", "exclusiveMinimum": 0,
                                  "description": "a packet without a result for this long is resent (a gap in the results resends at once)"},
            "congestion_control": {"type": "boolean", "description": "ECN-driven AIMD of the window: halved once per window with a marked result, else one more (off: W throughout)"},
            "ecn_threshold": {"type": "integer", "minimum": 0, "maximum": 0xFFFFFFFF,
                              "description": "the switch marks ECN on a packet joining an egress queue at least this many packets deep (0: never)"},
        },
    },
}
"""The schema of ``protocol.atp`` (experiments/config.py adds it to the config schema)."""


def line_rate_ate(link_bps: float, k: int) -> float:
    """Most aggregated elements per second ATP can reach on links of ``link_bps``: one frame
    of ``frame_bytes(k)`` per k elements each way on every worker's link (and the PS's)."""
    require_positive(link_bps=link_bps, k=k)
    return link_bps / (BITS_PER_BYTE * frame_bytes(k)) * k


def bound(link_bps: float, n_workers: int, k: int) -> float:
    """The line rate, whatever the number of workers."""
    return line_rate_ate(link_bps, k)


def job_expected_sum(inputs: list[np.ndarray], parameters: ATPParameters) -> ExpectedSum:
    """ATP's ``expected_sum``: the inputs quantized with the job's scale, summed exactly."""
    return expected_sum(inputs, len(inputs), parameters.exponent)


AGGREGATION = Aggregation(
    name=NAME, label="ATP", parameters=ATPParameters.from_config, read_parameters=ATPParameters.read, k_choices=K_CHOICES,
    defaults={}, section_defaults={SECTION: DEFAULTS}, sum_bits=PROTOCOL_BITS, host="hosts.atp.method:ATPMethod",
    reset_switch="switches.atp.programming:reset_job_state", properties=PROPERTIES, expected_sum=job_expected_sum,
    servers_per_job=1, server="hosts.atp.server:parameter_server", switch_address=False, drop_simulator=True,
    core="hosts.atp.core:WorkerHostCore",
    server_core="hosts.atp.core:ServerHostCore", program_fabric="switches.atp.programming:program_fabric",
    event_counters="switches.atp.programming:read_event_counters", client="hosts.atp.ddp_client:ddp_client",
    ddp_hook="hosts.torch_hook:switch_hook", torch_backend="atp", data_path="hosts.atp.native:resolve",
    tool_versions="hosts.atp.native:tool_versions",
)
"""ATP as an in-network aggregation protocol (methods/aggregation.py): SwitchML's k, so the two
designs' frames compare; one parameter server per job; DDP through the ``atp`` backend or hook;
``protocol.data_path`` chooses its worker's loop (hosts/atp/native's C loop, or the Python one)."""

ATP = in_network(AGGREGATION, name=NAME, label="ATP", colour="tab:purple", verify=verification.own_integer_sum(NAME), bound=bound)
