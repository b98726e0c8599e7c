"""Regenerate workloads/traces/*.yaml: ``python -m workloads.make_traces``.

Why generated: the per-tensor shapes of the computed models come from
:mod:`workloads.architectures`, and each file's sources and estimates are stated once here,
next to their reasoning. tests/test_workloads.py checks that the shipped files equal this
output, so the data and its derivation cannot drift apart.

About the model list and sizes: the SwitchML paper (Sapio et al., NSDI'21) evaluates
DeepLight (Criteo 1TB CTR), LSTM (One Billion Word), NCF (MovieLens-20M), BERT (SQuAD),
VGG19, UGATIT (selfie2anime), ResNet-50 (ImageNet) and SSD (COCO). Its model-size table is
recalled here as DeepLight 2,319 MB, LSTM 1,627 MB, NCF 121 MB, BERT 1,274 MB, VGG19 548 MB,
UGATIT 2,559 MB, ResNet-50 98 MB, SSD 91 MB [check: not verified against the paper text in
this workplace]. Read as MiB of float32 these match the architecture-computed totals of
NCF (121.4), BERT-large with the SQuAD head (1,274.5), VGG19 (548.0) and ResNet-50 (97.5)
exactly, which is why ``bert`` is BERT-large (``bert_base`` is shipped too, 109.5 M). SSD
computed from NVIDIA's SSD300/ResNet-50 layout gives 87.3 MiB, 4 % below the recalled 91.
DeepLight, LSTM and UGATIT depend on dataset-specific vocabularies/feature counts and
options that are not recoverable here, so their totals are the recalled sizes / 4 bytes and
they are one fused tensor (DDP/Horovod fuse gradients into 25-64 MB buckets anyway).

Compute times: the paper reports speedups, not per-iteration compute times, so every
compute time here is an estimate for one NVIDIA P100 16 GB per worker [check: the paper's
GPU], fp32, from public throughput figures or FLOP counts as stated per model.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from workloads import architectures
from workloads.trace import TRACES_DIR, TensorSpec, Trace, write_trace

log = logging.getLogger(__name__)

GPU = "NVIDIA P100 16 GB (one per worker) [check]"
MIB = 2**20
RECALLED = ("size recalled from the model table of Sapio et al., NSDI'21 [check]; total = {mib} MiB / 4 bytes "
            "(float32), +-131072 for the rounding to 1 MiB")


def _computed(name: str, model: str, task: str, tensors: architectures.Tensors, source: str, compute_s: float,
              batch: int, compute_source: str) -> Trace:
    specs = tuple(TensorSpec(n, math.prod(shape), shape) for n, shape in tensors)
    return Trace(name=name, model=model, task=task, total_params=sum(t.count for t in specs), derivation="computed",
                 params_source=source, compute_s=compute_s, gpu=GPU, batch_size=batch, compute_estimate=True,
                 compute_source=compute_source, tensors=specs)


def _estimated(name: str, model: str, task: str, mib: int, why: str, compute_s: float, batch: int,
               compute_source: str) -> Trace:
    total = mib * MIB // 4
    return Trace(name=name, model=model, task=task, total_params=total, derivation="estimate",
                 params_source=RECALLED.format(mib=mib) + ". " + why, compute_s=compute_s, gpu=GPU,
                 batch_size=batch, compute_estimate=True, compute_source=compute_source,
                 tensors=(TensorSpec("all_parameters", total),))


def all_traces() -> list[Trace]:
    return [
        _computed("resnet50", "ResNet-50", "ImageNet-1k classification", architectures.resnet50(),
                  "computed from the architecture (He et al. 2016, torchvision layout): 25,557,032 parameters",
                  0.29, 64, "estimate: ~220 images/s for ResNet-50 fp32 on a P100 in public TensorFlow benchmark "
                  "results, batch 64 -> 0.29 s"),
        _computed("vgg19", "VGG19", "ImageNet-1k classification", architectures.vgg19(),
                  "computed from the architecture (Simonyan & Zisserman 2015, configuration E): 143,667,240",
                  0.56, 64, "estimate: ~140 images/s for VGG16 fp32 on a P100 in public TensorFlow benchmark "
                  "results, VGG19 has 1.26x its FLOPs (19.6 vs 15.5 GFLOPs) -> ~115 images/s, batch 64 -> 0.56 s"),
        _computed("bert", "BERT-large (SQuAD fine-tuning)", "SQuAD question answering",
                  architectures.bert(24, 1024, 16, qa_head=True),
                  "computed from the architecture (Devlin et al. 2019; 24 layers, hidden 1024, vocab 30522, span "
                  "head): 334,094,338 = 1,274.5 MiB, matching the recalled paper size of 1,274 MB",
                  0.83, 4, "estimate from FLOPs: 6 x 334e6 params x 384 tokens x 4 sequences = 3.1e12 FLOP at "
                  "~3.7 TFLOP/s (40 % of the P100's 9.3 TFLOP/s fp32 peak) -> 0.83 s"),
        _computed("bert_base", "BERT-base", "SQuAD question answering (pooler variant, for the 110 M figure)",
                  architectures.bert(12, 768, 12, qa_head=False),
                  "computed from the architecture (Devlin et al. 2019; 12 layers, hidden 768, vocab 30522, "
                  "pooler): 109,482,240",
                  0.55, 8, "estimate from FLOPs: 6 x 110e6 x 384 tokens x 8 sequences = 2.0e12 FLOP at ~3.7 TFLOP/s "
                  "-> 0.55 s"),
        _computed("ncf", "NCF (NeuMF)", "MovieLens-20M recommendation", architectures.ncf(),
                  "computed from the architecture (He et al. 2017) with the MLPerf/NVIDIA reference sizes: 138,493 "
                  "users, 26,744 items, 64 factors, MLP 256-256-128-64: 31,832,577 = 121.4 MiB, matching the "
                  "recalled paper size of 121 MB",
                  0.02, 65536, "estimate from FLOPs: ~0.64 MFLOP per sample (MLP forward+backward) x 65,536 = "
                  "42 GFLOP (~10 ms) plus as long again for embedding gathers -> 0.02 s"),
        _computed("ssd", "SSD300 (ResNet-50 backbone)", "COCO 2017 object detection",
                  architectures.ssd300_resnet50(),
                  "computed from NVIDIA's SSD300 v1.1 layout as described in workloads/architectures.py: "
                  "22,894,902 = 87.3 MiB, 4 % below the recalled paper size of 91 MB (the paper's exact "
                  "variant is not known here)",
                  0.32, 32, "estimate: ~100 images/s for SSD300-ResNet-50 fp32 on a P100 (roughly half of "
                  "ResNet-50 classification throughput at 300x300 with the detection heads), batch 32 -> 0.32 s"),
        _estimated("deeplight", "DeepLight", "Criteo 1TB click-through-rate prediction", 2319,
                   "Dominated by the feature embedding table, whose row count depends on the Criteo "
                   "preprocessing threshold, so it cannot be derived here.",
                   0.05, 2048, "estimate: sparse embedding lookups plus a 3x400 MLP per sample, tens of ms per "
                   "batch of 2048 on a P100 -> 0.05 s (order of magnitude)"),
        _estimated("lstm", "LSTM language model", "One Billion Word language modelling", 1627,
                   "Dominated by the vocabulary embedding and softmax, whose sizes depend on the vocabulary cut "
                   "and projection used, so it cannot be derived here.",
                   0.3, 128, "estimate: a 2-layer LSTM with sampled softmax, 128 sequences x 20 steps, a few hundred "
                   "ms on a P100 -> 0.3 s (order of magnitude)"),
        _estimated("ugatit", "U-GAT-IT", "selfie2anime image-to-image translation", 2559,
                   "Two generators whose fully connected gamma/beta MLP takes the flattened 64x64x256 feature map "
                   "(268 M weights each) plus discriminators; the exact options used are not known here.",
                   0.45, 1, "estimate: two generators and four discriminators forward+backward on 256x256 images, "
                   "batch 1, a few hundred ms on a P100 -> 0.45 s (order of magnitude)"),
    ]


def main(out_dir: Path = TRACES_DIR) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for trace in all_traces():
        write_trace(trace, out_dir / f"{trace.name}.yaml")
        log.info("wrote %s: %d tensors, %d parameters", trace.name, len(trace.tensors), trace.total_params)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
