"""Running a user's own DDP script (workload kind ``ddp_script``) on the emulated hosts.

Per method, one rank of the script per host (hosts/ddp_script.py), on one network, once:
the script's process group is the method's backend (an in-network method's, ``switchml`` or
``atp``: float32/int32 sums through the switch, the rest on Gloo; ``gloo``: Gloo), whether
or not the script registers
``testbed_hook()``, so the same unmodified script compares the two on the same links.
The run is one job per method in the usual tables: runs.csv's row of a rank counts every
all-reduce of the script through the method (``tat_s`` their time, ``elements`` all their
elements, packets, retransmissions and bytes), and its ``verified`` is the script's last
all-reduces verified from every rank's inputs (experiments/kinds/torch_training.py's
``verify_buckets``: an in-network method's integer sums bit for bit against its protocol's
own quantization, ``methods.own_sums``; Gloo's sums within the float32 bound). The calls
that fell back to Gloo are counted in the log, and so are the input elements the
protocol's quantization flushed to 0 (docs/pytorch.md). A protocol whose jobs need servers
(ATP's parameter server) has them started on their hosts around the workers, as for every
kind (``PointNetwork.workers``). The script's own output
is in each rank's log (``logs/point0/<method>-rank<r>.log``).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Callable

import methods
from experiments.config import Experiment
from experiments.harness import Clock, ExperimentKind, PointNetwork, point_network, worker_spec
from experiments.kinds.torch_training import verify_buckets
from experiments.results import ResultsWriter, format_table
from experiments.workers import REPORT_GRACE_S

log = logging.getLogger(__name__)

class ScriptRunner:
    """Each method runs the script once on every host."""

    def __init__(self, experiment: Experiment, clock: Clock, writer: ResultsWriter, progress: Callable[[str], None]) -> None:
        self.experiment = experiment
        self.clock = clock
        self.writer = writer
        self.progress = progress
        self.point = experiment.points[0]
        workload = self.point.workload
        self.script = Path(workload["script"]).resolve()
        self.arguments = [str(argument) for argument in workload["args"]]

    def run(self) -> bool:
        pending = []
        for method in self.point.methods:
            if self.writer.has_rows(self.point.index, method, 1):
                log.info("%s: the script's run is already in %s, skipped (resume)", method, self.writer.run_dir)
                self.progress("skipped")
            else:
                self.writer.discard(self.point.index, method)
                pending.append(method)
        if not pending:
            return True
        ok = True
        with point_network(self.experiment, self.point, self.clock, self.writer) as held:
            for method in pending:
                ok &= self._run_script(held, method)
        return ok

    def _run_script(self, held: PointNetwork, method: str) -> bool:
        spec = replace(worker_spec(self.point, method), script=(str(self.script), *self.arguments))
        spec_path = spec.write(held.work / f"{method}.json")
        held.prepare(method)
        with held.workers(method, spec_path) as group:
            meter = held.meter(group)
            meter.start()
            group.release(1)
            reports = group.collect("done", held.job_limit(method), grace_s=REPORT_GRACE_S)
            verdicts = verify_buckets(method, reports, self.point.job.k, methods.own_sums(self.point.methods, self.point.protocol))
            self.writer.add_repetition(self.point, method, 1, reports, verdicts, meter.stop(), held.loss_mechanism,
                                       elements=reports[0]["elements"])
            group.finish()
        for rank, verdict in enumerate(verdicts):
            if not verdict.verified:
                log.error("%s rank %d: NOT VERIFIED: %s", method, rank, verdict.detail)
        fallbacks = reports[0]["fallbacks"]
        log.info("%s: %d all-reduces through the method, %d calls fell back to Gloo (rank 0%s)", method, reports[0]["all_reduces"],
                 sum(fallbacks.values()), "".join(f"; {name}: {count}" for name, count in sorted(fallbacks.items())))
        if methods.by_name(method).aggregation is not None:  # the switch sums integers: quantized floats
            flushed = [report["flushed"] for report in reports]
            log.info("%s: quantization flushed %d nonzero input elements to 0 (by rank: %s; docs/pytorch.md)", method,
                     sum(flushed), ", ".join(map(str, flushed)))
        log.info("%s: %s ran %.1f s, %.1f s of it all-reducing %d elements (slowest rank)", method,
                 self.script.name, max(r["script_s"] for r in reports), max(r["stats"]["tat_s"] for r in reports),
                 reports[0]["elements"])
        self.progress(f"{method}: {self.script.name} done")
        return all(v.verified for v in verdicts)


KIND = ExperimentKind(
    name="ddp_script",
    writer=ResultsWriter,
    runner=ScriptRunner,
    unit="method",
    units=lambda experiment: len(experiment.data["methods"]),
    report=format_table,
    emulated_only=True,
)
"""A user's DDP script, once per method, with the testbed's all-reduce behind its DDP hook."""
