"""Measure the shipped traces' per-layer compute on this CPU: ``python -m workloads.measure_layers``.

Writes ``workloads/traces/layers/<model>.yaml`` (workloads/layers.py reads them) for every
trace whose architecture is public and exact (workloads/architectures.py): ResNet-50,
VGG19, SSD300, BERT-large, BERT-base and NCF. Needs PyTorch (the optional extra), imported
inside the functions, so the rest of the package loads without it.

How: each model is built in PyTorch with exactly the trace's parameter names and shapes
(checked layer by layer against the trace before anything is timed), run forward and
backward once to warm up and then ``REPEATS`` times, and timed per layer with hooks, as the
recipe in workloads/trace.py records a dnn_benchmark CSV:

- forward: a forward hook on every module that owns parameters stamps when it finished;
- backward: a post-accumulate-grad hook on every parameter stamps when its gradient is
  ready, and a layer is done when its last parameter's gradient is.

A layer's time is the time from the previous stamp of the same pass (or the pass's start)
to its own, so everything a pass does -- activations, residual adds, attention's matrix
products, the loss -- is charged to the next layer to finish, and the layers' times add up
to the whole pass. The median over the repeats is written, in nanoseconds, with the
machine, PyTorch version, threads and batch in ``source``. Only the shares are used
(workloads/layers.py): they are scaled to the trace's per-iteration GPU time.
"""

from __future__ import annotations

import logging
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import yaml

from workloads.layers import PROFILES_DIR, layer_counts, layer_name, profile_path, profile_record
from workloads.trace import load_trace

log = logging.getLogger(__name__)

REPEATS = 3
THREADS = 1
"""One thread: the shares of one core, not of how well each operator parallelises on this machine."""


def _resnet_trunk(nn: Any, stages: int, layer3_stride: int) -> dict[str, Any]:
    """conv1, bn1 and ``stages`` bottleneck stages with architectures._resnet50_trunk's names."""

    class Bottleneck(nn.Module):
        def __init__(self, c_in: int, width: int, stride: int, downsample: bool) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, 4 * width, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(4 * width)
            self.relu = nn.ReLU()
            self.downsample = nn.Sequential(nn.Conv2d(c_in, 4 * width, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(4 * width)) if downsample else None

        def forward(self, x: Any) -> Any:
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + (self.downsample(x) if self.downsample is not None else x))

    modules: dict[str, Any] = {"conv1": nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False), "bn1": nn.BatchNorm2d(64),
                               "relu": nn.ReLU(), "maxpool": nn.MaxPool2d(3, stride=2, padding=1)}
    c_in = 64
    for stage, (width, blocks, stride) in enumerate([(64, 3, 1), (128, 4, 2), (256, 6, layer3_stride), (512, 3, 2)][:stages], start=1):
        modules[f"layer{stage}"] = nn.Sequential(*[Bottleneck(c_in if b == 0 else 4 * width, width, stride if b == 0 else 1, b == 0)
                                                   for b in range(blocks)])
        c_in = 4 * width
    return modules


def resnet50(torch: Any) -> tuple[Any, Callable[[], Any]]:
    nn = torch.nn

    class ResNet50(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for name, module in _resnet_trunk(nn, 4, 2).items():
                self.add_module(name, module)
            self.fc = nn.Linear(2048, 1000)

        def forward(self, x: Any) -> Any:
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    return ResNet50(), lambda: torch.randn(4, 3, 224, 224)


def vgg19(torch: Any) -> tuple[Any, Callable[[], Any]]:
    nn = torch.nn
    layers: list[Any] = []
    c_in = 3
    for item in [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]:
        if item == "M":
            layers.append(nn.MaxPool2d(2))
        else:
            layers += [nn.Conv2d(c_in, int(item), 3, padding=1), nn.ReLU()]
            c_in = int(item)

    class VGG19(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(*layers)
            self.classifier = nn.Sequential(nn.Linear(512 * 7 * 7, 4096), nn.ReLU(), nn.Dropout(), nn.Linear(4096, 4096), nn.ReLU(),
                                            nn.Dropout(), nn.Linear(4096, 1000))

        def forward(self, x: Any) -> Any:
            return self.classifier(torch.flatten(nn.functional.adaptive_avg_pool2d(self.features(x), 7), 1))

    return VGG19(), lambda: torch.randn(2, 3, 224, 224)


def ssd300(torch: Any) -> tuple[Any, Callable[[], Any]]:
    """NVIDIA's SSD300 v1.1 (architectures.ssd300_resnet50): layer3 at stride 1 gives 38x38 features at 300x300."""
    nn = torch.nn
    outs, mids, boxes = [1024, 512, 512, 256, 256, 256], [256, 256, 128, 128, 128], [4, 6, 6, 6, 4, 4]

    class Backbone(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            for name, module in _resnet_trunk(nn, 3, 1).items():
                self.add_module(name, module)

        def forward(self, x: Any) -> Any:
            return self.layer3(self.layer2(self.layer1(self.maxpool(self.relu(self.bn1(self.conv1(x)))))))

    def extra(i: int, c_in: int, mid: int, c_out: int) -> Any:
        stride, padding = (2, 1) if i < 3 else (1, 0)
        return nn.Sequential(nn.Conv2d(c_in, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                             nn.Conv2d(mid, c_out, 3, stride=stride, padding=padding, bias=False), nn.BatchNorm2d(c_out), nn.ReLU())

    class SSD300(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.backbone = Backbone()
            self.additional_blocks = nn.ModuleList([extra(i, *shape) for i, shape in enumerate(zip(outs, mids, outs[1:]))])
            self.loc = nn.ModuleList([nn.Conv2d(c, b * 4, 3, padding=1) for b, c in zip(boxes, outs)])
            self.conf = nn.ModuleList([nn.Conv2d(c, b * 81, 3, padding=1) for b, c in zip(boxes, outs)])

        def forward(self, x: Any) -> Any:
            features = [self.backbone(x)]
            for block in self.additional_blocks:
                features.append(block(features[-1]))
            heads = [torch.cat([loc(f).flatten(1), conf(f).flatten(1)], 1) for f, loc, conf in zip(features, self.loc, self.conf)]
            return torch.cat(heads, 1)

    return SSD300(), lambda: torch.randn(2, 3, 300, 300)


def bert(torch: Any, layers: int, hidden: int, heads: int, qa_head: bool, batch: int) -> tuple[Any, Callable[[], Any]]:
    """architectures.bert's names: embeddings' three tables are the ``embeddings`` module's own parameters."""
    nn = torch.nn
    seq = 128

    class Embeddings(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.word = nn.Parameter(torch.randn(30522, hidden) * 0.02)
            self.position = nn.Parameter(torch.randn(512, hidden) * 0.02)
            self.token_type = nn.Parameter(torch.randn(2, hidden) * 0.02)
            self.LayerNorm = nn.LayerNorm(hidden)

        def forward(self, ids: Any) -> Any:
            return self.LayerNorm(self.word[ids] + self.position[: ids.shape[1]] + self.token_type[0])

    class SelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.query, self.key, self.value = nn.Linear(hidden, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, hidden)

        def forward(self, x: Any) -> Any:
            b, s, _ = x.shape
            q, k, v = (proj(x).view(b, s, heads, hidden // heads).transpose(1, 2) for proj in (self.query, self.key, self.value))
            return nn.functional.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, s, hidden)

    class Output(nn.Module):
        def __init__(self, fan_in: int) -> None:
            super().__init__()
            self.dense = nn.Linear(fan_in, hidden)
            self.LayerNorm = nn.LayerNorm(hidden)

        def forward(self, x: Any, residual: Any) -> Any:
            return self.LayerNorm(self.dense(x) + residual)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.add_module("self", SelfAttention())
            self.output = Output(hidden)

        def forward(self, x: Any) -> Any:
            return self.output(self.self(x), x)

    class Intermediate(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dense = nn.Linear(hidden, 4 * hidden)

        def forward(self, x: Any) -> Any:
            return nn.functional.gelu(self.dense(x))

    class EncoderLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attention, self.intermediate, self.output = Attention(), Intermediate(), Output(4 * hidden)

        def forward(self, x: Any) -> Any:
            attended = self.attention(x)
            return self.output(self.intermediate(attended), attended)

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = nn.ModuleList([EncoderLayer() for _ in range(layers)])

        def forward(self, x: Any) -> Any:
            for layer in self.layer:
                x = layer(x)
            return x

    class Pooler(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dense = nn.Linear(hidden, hidden)

        def forward(self, x: Any) -> Any:
            return torch.tanh(self.dense(x[:, 0]))

    class Bert(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embeddings, self.encoder = Embeddings(), Encoder()
            if qa_head:
                self.qa_outputs = nn.Linear(hidden, 2)
            else:
                self.pooler = Pooler()

        def forward(self, ids: Any) -> Any:
            x = self.encoder(self.embeddings(ids))
            return self.qa_outputs(x) if qa_head else self.pooler(x)

    return Bert(), lambda: torch.randint(0, 30522, (batch, seq))


def ncf(torch: Any) -> tuple[Any, Callable[[], Any]]:
    """NeuMF with architectures.ncf's sizes; dense embedding gradients, as DDP all-reduces them."""
    nn = torch.nn
    users, items, factors, mlp = 138_493, 26_744, 64, (256, 256, 128, 64)

    class NCF(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mf_user_embed, self.mf_item_embed = nn.Embedding(users, factors), nn.Embedding(items, factors)
            self.mlp_user_embed, self.mlp_item_embed = nn.Embedding(users, mlp[0] // 2), nn.Embedding(items, mlp[0] // 2)
            self.mlp = nn.ModuleList([nn.Linear(a, b) for a, b in zip(mlp, mlp[1:])])
            self.final = nn.Linear(factors + mlp[-1], 1)

        def forward(self, pairs: Any) -> Any:
            user, item = pairs[:, 0], pairs[:, 1]
            gmf = self.mf_user_embed(user) * self.mf_item_embed(item)
            x = torch.cat([self.mlp_user_embed(user), self.mlp_item_embed(item)], 1)
            for layer in self.mlp:
                x = torch.relu(layer(x))
            return torch.sigmoid(self.final(torch.cat([gmf, x], 1)))

    batch = 8192
    return NCF(), lambda: torch.stack([torch.randint(0, users, (batch,)), torch.randint(0, items, (batch,))], 1)


MODELS: dict[str, tuple[Callable[[Any], tuple[Any, Callable[[], Any]]], str]] = {
    "resnet50": (resnet50, "batch 4 of 3x224x224"),
    "vgg19": (vgg19, "batch 2 of 3x224x224"),
    "ssd": (ssd300, "batch 2 of 3x300x300"),
    "bert": (lambda torch: bert(torch, 24, 1024, 16, True, 1), "batch 1 of 128 tokens"),
    "bert_base": (lambda torch: bert(torch, 12, 768, 12, False, 2), "batch 2 of 128 tokens"),
    "ncf": (ncf, "batch 8192 (user, item) pairs"),
}
"""The traces measured here, with the batch each is timed at (smaller than the GPU's: only shares are used)."""


def owners(model: Any) -> dict[str, Any]:
    """Every module that owns parameters itself, by its name: the layer name of its parameters
    (check_layers holds the models to that; none of them has parameters of its own at the root)."""
    return {name: module for name, module in model.named_modules() if any(True for _ in module.parameters(recurse=False))}


def check_layers(model: Any, trace_name: str) -> None:
    """The PyTorch model has exactly the trace's layers, names and sizes (ValueError naming the first difference)."""
    counts: dict[str, int] = {}
    for name, parameter in model.named_parameters():
        counts[layer_name(name)] = counts.get(layer_name(name), 0) + parameter.numel()
    expected = layer_counts(load_trace(trace_name))
    if counts != expected:
        differ = sorted(set(counts.items()) ^ set(expected.items()))[:4]
        raise ValueError(f"{trace_name}: the PyTorch model's layers differ from the trace's: {differ}")


def time_layers(model: Any, make_input: Callable[[], Any]) -> list[tuple[str, int, int, int]]:
    """(layer, elements, forward ns, backward ns) in forward order, medians over REPEATS after a warm-up."""
    layers = owners(model)
    forward_end: dict[str, int] = {}
    grad_end: dict[str, int] = {}
    parameter_layer = {id(p): layer for layer, module in layers.items() for p in module.parameters(recurse=False)}
    for layer, module in layers.items():
        module.register_forward_hook(lambda m, args, out, layer=layer: forward_end.__setitem__(layer, time.perf_counter_ns()))
    for p in model.parameters():
        p.register_post_accumulate_grad_hook(
            lambda p: grad_end.__setitem__(parameter_layer[id(p)], time.perf_counter_ns()))
    runs: list[tuple[list[str], dict[str, int], dict[str, int]]] = []
    for repeat in range(REPEATS + 1):
        model.zero_grad(set_to_none=True)
        forward_end.clear()
        grad_end.clear()
        x = make_input()
        start = time.perf_counter_ns()
        loss = model(x).float().square().mean()
        backward_start = time.perf_counter_ns()
        loss.backward()
        order = sorted(forward_end, key=forward_end.__getitem__)
        if repeat:
            runs.append((order, _durations(forward_end, start), _durations(grad_end, backward_start)))
    order = runs[0][0]
    counts = {layer: sum(p.numel() for p in layers[layer].parameters(recurse=False)) for layer in order}
    return [(layer, counts[layer], int(statistics.median(r[1][layer] for r in runs)), int(statistics.median(r[2][layer] for r in runs)))
            for layer in order]


def _durations(stamps: dict[str, int], start: int) -> dict[str, int]:
    """Each layer's time from the previous stamp (or ``start``) to its own."""
    durations, previous = {}, start
    for layer in sorted(stamps, key=stamps.__getitem__):
        durations[layer] = stamps[layer] - previous
        previous = stamps[layer]
    return durations


def measure(name: str) -> dict[str, Any]:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(THREADS)
    build, batch = MODELS[name]
    model, make_input = build(torch)
    check_layers(model, name)
    rows = time_layers(model, make_input)
    source = (f"measured by python -m workloads.measure_layers on {platform.processor() or platform.machine()} "
              f"({THREADS} thread, PyTorch {torch.__version__}, {batch}, median of {REPEATS} after a warm-up, "
              f"{time.strftime('%Y-%m-%d', time.gmtime())}): each layer's time from the previous layer's hook to its own, "
              "forward (forward hooks) and backward (gradient-accumulated hooks); only the shares are used")
    return profile_record(name, source, rows)


def main() -> None:
    PROFILES_DIR.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        began = time.perf_counter()
        record = measure(name)
        profile_path(name).write_text(yaml.safe_dump(record, sort_keys=False, width=120))
        log.info("%s: %d layers in %.0f s", name, len(record["layers"]), time.perf_counter() - began)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    main()
