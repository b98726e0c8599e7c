"""The list of paper figures and how each one is made from a set of runs; and the figures
drawn from one run of their own kind (``RUN_FIGURES``).

The command line and the notebooks both go through ``render`` so a figure looks the same
wherever it is drawn. Each figure names the runs that can provide it (``RunSource``): most
need a run that sweeps one runs.csv column (recognised by ``aggregate.swept_column``), the
loss timeline any run with a SwitchML job under loss. When several runs provide a figure,
the newest run (summary.json ``started_utc``) is used, because a rerun of a configuration
supersedes the older one and mixing runs would mix link rates.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from analysis import figures, hierarchical, multi_tenant, shared_switch, tables, training_step
from analysis.aggregate import runs_sweeping, runs_training, runs_with_lossy_switchml
from analysis.context import EmulationContext, emulation_context
from analysis.load import Results
from analysis.run_figure import RunFigure
from analysis.tables import MissingData
import methods

log = logging.getLogger(__name__)

SUBJECT, SUBJECT_NAME = methods.SWITCHML.label, methods.SWITCHML.name
"""The method under study (the registry's), whose model the figures' notes describe."""


@dataclass(frozen=True)
class RunSource:
    """Which runs can provide a figure: ``runs`` picks their ids from runs.csv rows."""

    requirement: str
    """What such a run does, completing "no run ..." when none does."""
    runs: Callable[[pd.DataFrame], list[str]]


def sweeping(column: str) -> RunSource:
    """Runs whose points sweep the runs.csv ``column``."""
    return RunSource(f"sweeps {column}", partial(runs_sweeping, column=column))


LOSSY_SWITCHML = RunSource(f"has a {SUBJECT} job with loss > 0", runs_with_lossy_switchml)
TRAINING = RunSource("trained a model (workload training)", runs_training)
TORCH_TRAINING = RunSource("trained a model with PyTorch DDP (workload torch)", partial(runs_training, workload="torch"))
LAYER_STEPS = RunSource("ran training iterations layer by layer (workload layers)", training_step.runs_layer_steps)
ONE_BUCKET_MODELS = RunSource(
    "sweeps workload with one all-reduce per iteration (workload trace)",
    lambda runs: sorted(set(runs_sweeping(runs, "workload")) - set(training_step.runs_layer_steps(runs))))


@dataclass(frozen=True)
class FigureSpec:
    """A figure: its file name, the runs it can use, its numbers, its drawing, a student's note."""

    name: str
    source: RunSource
    table: Callable[[Results], pd.DataFrame]
    draw: Callable[..., Figure]
    explanation: str


_ATE_NOTE = f"""
**Metric.** ATE/s (aggregated tensor elements per second) = elements / TAT, where TAT is
the time until the *slowest* worker holds the full sum. Points are medians over
repetitions; error bars span min to max.

**Models.** {SUBJECT} sends every element once and receives the result once, in frames of
`frame_bytes(k)` bytes, so on links of B bit/s it can reach at most
`B * (4k / frame_bytes(k)) / 32` elements/s whatever the number of workers (dashed line;
preamble and inter-frame gap are not counted because htb shapes frame bytes). A ring
all-reduce moves each byte 2(n-1)/n times per host, so its bound is
`B/8 * n / (2(n-1)) / 4` elements/s, falling towards half the link rate as n grows (dotted
line; a co-located sharded parameter server has exactly the same bound). The paper's
claim is the gap between the two: 2(n-1)/n at line rate.
"""

FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(
        "ate_vs_workers", sweeping("n_workers"), tables.ate_vs_workers_table, figures.ate_vs_workers,
        "# ATE/s vs number of workers\n" + _ATE_NOTE,
    ),
    FigureSpec(
        "ate_vs_workers_normalised", sweeping("n_workers"), tables.ate_vs_workers_table,
        partial(figures.ate_vs_workers, normalised=True),
        "# ATE/s vs number of workers, normalised by the line-rate bound\n" + _ATE_NOTE
        + f"\nDividing by the {SUBJECT} line-rate bound removes the emulated link rate, so these"
        f" fractions can be compared with the paper's 100 Gbit/s numbers ({SUBJECT} near its"
        " bound, the NCCL ring falling as workers are added).\n",
    ),
    FigureSpec(
        "tat_vs_size", sweeping("elements"), tables.tat_vs_size_table, figures.tat_vs_size,
        """# TAT vs tensor size

**Metric.** TAT (tensor aggregation time): from handing the tensor to the library until
the slowest worker has the whole aggregated result. Log-log axes.

**Models.** Each bound on throughput becomes a bound on time: TAT >= elements / bound.
Large tensors should run parallel to the bound lines (bandwidth-bound); small ones sit
above them because a fixed start-up cost (first round trip, pool ramp-up, for the ring
2(n-1) steps of latency) dominates.
""",
    ),
    FigureSpec(
        "tat_inflation_vs_loss", sweeping("loss"), tables.tat_inflation_table, figures.tat_inflation_vs_loss,
        f"""# TAT inflation vs loss rate

**Metric.** TAT at a given per-link loss probability divided by the median TAT of the
same method without loss (1 = unaffected). Error bars: min-max over repetitions, each
divided by the lossless median.

**Model.** No closed form is drawn. {SUBJECT} recovers a lost update or result with a
per-slot timeout (10 ms in the reference), so a lost packet stalls one slot while the rest
of the pool keeps the link busy: inflation should stay small until losses are frequent
enough to stall most slots at once. TCP-based baselines instead shrink their congestion
window on every loss.
""",
    ),
    FigureSpec(
        "loss_timeline", LOSSY_SWITCHML, tables.loss_timeline_table, figures.loss_timeline,
        f"""# Packets sent per bin under loss

**Metric.** For one {SUBJECT} job at the run's highest loss rate (the newest run with a
lossy {SUBJECT} job: configs/loss_timeline.yaml, or a loss sweep), the number of packets
each worker sent in each bin (timeline.csv): 10 ms, as in the paper, or finer for a job
that lasts only a few of them (a simulated job at 100 Gbit/s), merged into wider bins
when a long job would have more than 200.

**Model.** The dashed line is the most frames one worker's link can carry in one bin of
t seconds, `B * t / (8 * frame_bytes(k))`. Self-clocked sending sits near it; a dip is a
slot waiting for its retransmission timeout.
""",
    ),
    FigureSpec(
        "pool_size_sensitivity", sweeping("pool_size"), tables.pool_size_table, figures.pool_size_sensitivity,
        """# Pool size sensitivity

**Metric.** ATE/s as the number of switch slots a job may use (pool size s) grows.

**Model.** A worker has at most s packets in flight, so throughput is about
`min(line rate, s * k / RTT)`: it rises with s until the pool covers the
bandwidth-delay product, then flattens at the line-rate bound (dashed). The paper uses
this to argue that a small amount of switch memory suffices.
""",
    ),
    FigureSpec(
        "training_speedup", ONE_BUCKET_MODELS, tables.training_speedup_table, figures.training_speedup,
        f"""# Training speedup per model

**Metric.** One training iteration = compute + gradient all-reduce (no overlap). Speedup
of {SUBJECT} over a baseline = `(compute * D + comm_baseline) / (compute * D + comm_{SUBJECT_NAME})`,
with comm times measured (median TAT of the model's gradients) and compute times from the
model trace.

**Time dilation and size scaling.** The emulated links are 100 Gbit/s / (emulated rate)
times slower than the paper's, so communication takes about that much longer; the runner
multiplies the trace's real-GPU compute times by the config's `workload.time_dilation` D to
keep the compute : communication ratio. To keep runs short, `workload.size_scale` s
all-reduces every gradient tensor at ceil(count * s) elements and multiplies the compute
time by s as well: steady-state communication time is linear in size, so the ratio, and
the speedup, is unchanged (fixed per-job latency makes very small scaled tensors slightly
pessimistic). `compute_s` in runs.csv is already multiplied by D and s. The figure prints
D next to the link slowdown (if they differ, the compute share is distorted) and s.

**Model.** If {SUBJECT} communicated exactly 2(n-1)/n times faster than the ring (both at
line rate), the speedup would be the diamond. Communication-bound models (large gradients,
little compute) approach 2(n-1)/n; compute-bound ones approach 1.
""",
    ),
    FigureSpec(
        "training_speedup_layers", LAYER_STEPS, training_step.training_step_table, figures.training_step_speedup,
        f"""# Training speedup per model, layer by layer, with overlap

**What ran.** One training iteration per model (workload `layers`): every layer's gradients
(a layer is a module that owns parameters; full size at paper scale) all-reduced as one
job, in the order the backward pass hands them over, one job at a time on an otherwise idle
network. A layer larger than `max_job_elements` is several jobs back to back.

**Metric.** The iteration is composed as the {SUBJECT} reference's `dnn_benchmark` runs it
(workloads/step_schedule.py): a layer's all-reduce starts when its backward pass is done
and the previous all-reduce has finished, and the next forward pass waits for it only when
it reaches that layer. Speedup = the baseline's steady-state iteration time / {SUBJECT}'s.
The black ticks are the same without overlap: compute, then every all-reduce.

**Compute.** Each layer's share of the iteration, measured with PyTorch on a CPU
(workloads/measure_layers.py, `workloads/traces/layers/`), times the trace's per-iteration
GPU time (its stated source). The fused traces (DeepLight, LSTM, UGATIT: one tensor) are
one layer, so nothing of their all-reduce can hide.

**Baselines.** On the simulated clock the ring and the PS are their line-rate bound times
`simulation.baseline_efficiency`: a model, named in the legend. In emulation they ran over
Linux TCP. The paper's are NCCL's, which is why its headline (grey lines, at 100 Gbit/s)
is larger: docs/figures/README.md says why.
""",
    ),
    FigureSpec(
        "training_convergence", TRAINING, tables.training_convergence_table, figures.training_convergence,
        f"""# Training convergence: quantized in-network aggregation against exact all-reduce

**What ran.** Data-parallel SGD of a small MLP on scikit-learn's digits
(configs/training_convergence.yaml): every worker computes the gradient of its own
minibatch, the gradients are all-reduced through the emulated network by {SUBJECT} (int32
sums of quantized values in the switch), ring all-reduce or the parameter server, and every
worker applies the same averaged gradient. Every step is verified as any all-reduce is
({SUBJECT}'s integer sum bit for bit), and every worker's parameters are checked equal after
every step.

**Series.** `exact` applies float64 sums of the same gradients; `{SUBJECT_NAME} 8-bit` and
`{SUBJECT_NAME} 5-bit` apply {SUBJECT}'s arithmetic with 8- or 5-bit sums instead of 32-bit
(scale floor((2^(b-1)-1)/n) / 2^e). These three are replayed offline: a quantization
ablation is a property of the arithmetic, not of the network.

**Metrics.** Test accuracy after each step (top), against the emulated time the network
methods took (middle: the slowest worker's compute + all-reduce, summed over steps), and
the largest difference between a series' parameters and the exact reference's (bottom, log
scale). Accuracy curves can coincide although the parameters drift apart (8 bits): the
bottom panel is the stricter comparison. 32-bit {SUBJECT} stays within float32
rounding of exact; the ring and PS differ by their own float32 summation order.
""",
    ),
    FigureSpec(
        "training_torch", TORCH_TRAINING, tables.training_convergence_table, figures.training_torch,
        f"""# PyTorch DDP through the emulated switch: the {SUBJECT} hook against Gloo

**What ran.** A small CNN (conv 3x3 to 8 maps, a 32-unit hidden layer, 4,538 parameters)
on scikit-learn's digits, trained with PyTorch's DistributedDataParallel by one rank per
emulated host (configs/training_torch.yaml), twice from the same seed, shards and
minibatches: once with the {SUBJECT} communication hook (hosts/torch_hook.py: every gradient
bucket quantized, summed as int32 in the switch, averaged) and once with Gloo's own
all-reduce (a float32 ring over TCP on the same links). Every step is verified from the
ranks' bucket gradients ({SUBJECT}'s integer sums bit for bit, Gloo's average within the
float32 summation bound) and every rank's parameters are checked equal.

**Series.** `exact` is the same training in one process with the float64 average of every
rank's gradient, replayed offline.

**Metrics.** Test accuracy after each step (top), against the emulated time each method
took (middle: the slowest rank's step, forward, backward with its all-reduce and the SGD
update, summed over steps), and the largest difference between a series' parameters and
the exact replay's (bottom, log scale). Both methods stay within float32 rounding and
quantization of exact; the middle panel is where they differ: how long their steps take
on the same links.
""",
    ),
)  # fmt: skip


RUN_FIGURES: tuple[RunFigure, ...] = (hierarchical.FIGURE, shared_switch.FIGURE, multi_tenant.FIGURE)
"""Figures each drawn from the newest run of its own kind (analysis/run_figure.py), not
from a runs.csv sweep: not in ``FIGURES``, which the notebooks and labs render from ``Results``."""


def by_name(name: str) -> FigureSpec:
    """The figure called ``name``."""
    for spec in FIGURES:
        if spec.name == name:
            return spec
    raise KeyError(f"no figure named {name!r}; known: {', '.join(spec.name for spec in FIGURES)}")


def select_run(results: Results, source: RunSource) -> Results:
    """The newest run ``source`` accepts; raises MissingData if there is none."""
    accepted = source.runs(results.runs)
    if not accepted:
        raise MissingData(f"no run {source.requirement}")
    candidates = results.summary[results.summary["run"].isin(accepted)].sort_values(["started_utc", "run"])
    chosen = candidates["run"].iloc[-1]
    if len(candidates) > 1:
        ignored = ", ".join(candidates["run"].iloc[:-1])
        log.info("%s: using newest run %s, ignoring %s", source.requirement, chosen, ignored)
    return results.only(chosen)


def render(spec: FigureSpec, results: Results) -> tuple[pd.DataFrame, Figure]:
    """The table and figure ``spec`` draws from ``results``; raises MissingData if it cannot."""
    table, fig, _ = render_run(spec, select_run(results, spec.source))
    return table, fig


def render_run(spec: FigureSpec, run: Results) -> tuple[pd.DataFrame, Figure, EmulationContext]:
    """``render`` from the run ``select_run`` chose, and the context the figure states,
    which ``save_figure`` keeps beside it."""
    table = spec.table(run)
    context = emulation_context(run)
    return table, spec.draw(table, context), context


def save(spec: FigureSpec, table: pd.DataFrame, fig: Figure, out_dir: Path) -> list[Path]:
    """Write <name>.png, <name>.pdf and <name>.csv (the numbers behind it) into ``out_dir``."""
    return save_figure(spec.name, table, fig, out_dir)


def save_figure(name: str, table: pd.DataFrame, fig: Figure, out_dir: Path, drawn_by: dict | None = None) -> list[Path]:
    """``save`` for any figure called ``name`` (the labs' figures too). ``drawn_by`` (which
    drawing, and the context or summary keys it read) goes into <name>.json, from which
    ``python -m analysis.redraw`` draws the figure again out of its CSV, without the runs."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.{suffix}" for suffix in ("png", "pdf", "csv")]
    fig.savefig(paths[0], dpi=150)
    fig.savefig(paths[1])
    table.to_csv(paths[2], index=False)
    if drawn_by is not None:
        paths.append(out_dir / f"{name}.json")
        paths[-1].write_text(json.dumps(drawn_by, indent=1, allow_nan=True) + "\n")
    return paths
