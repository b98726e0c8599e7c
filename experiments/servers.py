"""The hosts a point's jobs need besides their workers (``Aggregation.servers_per_job``:
ATP's parameter server), as both clocks' networks cable them and the workers' specs name them.
"""

from __future__ import annotations

import methods
from experiments.config import Point
from switches.fabric import Station
from switches.topology_fabric import server_stations


def job_servers(point: Point, method: str) -> dict[int, tuple[Station, ...]]:
    """Each of the point's jobs' server hosts for ``method``'s protocol (its record's
    ``servers_per_job``, switches/topology_fabric.py's ``server_stations``), by job id; none
    for a method whose jobs need none."""
    aggregation = methods.by_name(method).aggregation
    per_job = 0 if aggregation is None else aggregation.servers_per_job
    if not per_job:
        return {}
    job_ids = [job["job_id"] for job in point.data.get("jobs") or ()] or [point.job.job_id]
    return dict(zip(job_ids, server_stations(point.topology, [per_job] * len(job_ids)), strict=True))
