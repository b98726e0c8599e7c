"""Per-tensor parameter shapes of the trace models whose architecture is public and exact.

Why compute instead of typing numbers in: the totals quoted for these models (ResNet-50
25.6 M, VGG19 143.7 M, BERT-base 110 M, ...) are the sums of these shapes, so generating the
trace from the architecture definition makes every per-tensor count checkable. Each function
returns ``[(name, shape), ...]`` in the order the framework registers the parameters (which
is the reverse of the order backpropagation produces gradients). Only trainable parameters
count: BatchNorm running statistics are buffers and are not all-reduced.
"""

from __future__ import annotations

Shape = tuple[int, ...]
Tensors = list[tuple[str, Shape]]


def _bn(prefix: str, channels: int) -> Tensors:
    return [(f"{prefix}.weight", (channels,)), (f"{prefix}.bias", (channels,))]


def _linear(prefix: str, fan_in: int, fan_out: int, bias: bool = True) -> Tensors:
    return [(f"{prefix}.weight", (fan_out, fan_in))] + ([(f"{prefix}.bias", (fan_out,))] if bias else [])


def _conv(prefix: str, c_in: int, c_out: int, k: int, bias: bool) -> Tensors:
    return [(f"{prefix}.weight", (c_out, c_in, k, k))] + ([(f"{prefix}.bias", (c_out,))] if bias else [])


def _resnet50_trunk(stages: int) -> Tensors:
    """conv1 + bn1 + the first ``stages`` bottleneck stages of ResNet-50 (He et al. 2016, torchvision v1.5 layout)."""
    tensors = _conv("conv1", 3, 64, 7, bias=False) + _bn("bn1", 64)
    c_in = 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)][:stages], start=1):
        for block in range(blocks):
            p = f"layer{stage}.{block}"
            tensors += _conv(f"{p}.conv1", c_in, width, 1, False) + _bn(f"{p}.bn1", width)
            tensors += _conv(f"{p}.conv2", width, width, 3, False) + _bn(f"{p}.bn2", width)
            tensors += _conv(f"{p}.conv3", width, 4 * width, 1, False) + _bn(f"{p}.bn3", 4 * width)
            if block == 0:
                tensors += _conv(f"{p}.downsample.0", c_in, 4 * width, 1, False) + _bn(f"{p}.downsample.1", 4 * width)
            c_in = 4 * width
    return tensors


def resnet50() -> Tensors:
    """ResNet-50 for ImageNet-1k: 25,557,032 parameters."""
    return _resnet50_trunk(4) + _linear("fc", 2048, 1000)


def vgg19() -> Tensors:
    """VGG19 (configuration E, Simonyan & Zisserman 2015) without BatchNorm: 143,667,240 parameters."""
    plan = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]
    tensors: Tensors = []
    c_in, index = 3, 0
    for item in plan:
        if item != "M":
            tensors += _conv(f"features.{index}", c_in, int(item), 3, bias=True)
            c_in = int(item)
            index += 2  # conv, ReLU
        else:
            index += 1  # max-pool
    return tensors + _linear("classifier.0", 512 * 7 * 7, 4096) + _linear("classifier.3", 4096, 4096) \
        + _linear("classifier.6", 4096, 1000)


def bert(layers: int, hidden: int, heads: int, qa_head: bool, vocab: int = 30522, positions: int = 512,
         types: int = 2) -> Tensors:
    """BERT encoder (Devlin et al. 2019); ``qa_head`` = SQuAD span head instead of the pooler.

    BERT-base with pooler: 109,482,240; BERT-large with the SQuAD head: 334,094,338.
    ``heads`` does not change the count (it splits ``hidden``) and is checked to divide it.
    """
    if hidden % heads:
        raise ValueError(f"hidden size {hidden} is not divisible by {heads} heads")
    inner = 4 * hidden
    tensors: Tensors = [("embeddings.word", (vocab, hidden)), ("embeddings.position", (positions, hidden)),
                        ("embeddings.token_type", (types, hidden))] + _bn("embeddings.LayerNorm", hidden)
    for i in range(layers):
        p = f"encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            tensors += _linear(f"{p}.attention.self.{proj}", hidden, hidden)
        tensors += _linear(f"{p}.attention.output.dense", hidden, hidden) + _bn(f"{p}.attention.output.LayerNorm", hidden)
        tensors += _linear(f"{p}.intermediate.dense", hidden, inner)
        tensors += _linear(f"{p}.output.dense", inner, hidden) + _bn(f"{p}.output.LayerNorm", hidden)
    return tensors + (_linear("qa_outputs", hidden, 2) if qa_head else _linear("pooler.dense", hidden, hidden))


def ncf(users: int = 138_493, items: int = 26_744, factors: int = 64, mlp: tuple[int, ...] = (256, 256, 128, 64)) -> Tensors:
    """NeuMF (He et al. 2017) on MovieLens-20M with the MLPerf/NVIDIA reference sizes: 31,832,577 parameters.

    GMF embeddings of ``factors``; MLP embeddings of mlp[0]/2 each, concatenated to mlp[0].
    """
    tensors: Tensors = [("mf_user_embed", (users, factors)), ("mf_item_embed", (items, factors)),
                        ("mlp_user_embed", (users, mlp[0] // 2)), ("mlp_item_embed", (items, mlp[0] // 2))]
    for i, (a, b) in enumerate(zip(mlp, mlp[1:])):
        tensors += _linear(f"mlp.{i}", a, b)
    return tensors + _linear("final", factors + mlp[-1], 1)


def ssd300_resnet50(classes: int = 81) -> Tensors:
    """SSD300 with a ResNet-50 backbone cut after conv4_x (NVIDIA DeepLearningExamples SSD300 v1.1 layout).

    Backbone: ResNet-50 conv1..layer3 (the stride change in layer3 does not change shapes).
    Extra feature layers: 1x1 then 3x3 stride-2 convolutions without bias, each with BatchNorm.
    Heads: a 3x3 localisation (4 per default box) and classification (``classes`` per box)
    convolution with bias on each of the six feature maps (4, 6, 6, 6, 4, 4 default boxes).
    """
    tensors = [(f"backbone.{name}", shape) for name, shape in _resnet50_trunk(3)]
    outs = [1024, 512, 512, 256, 256, 256]
    mids = [256, 256, 128, 128, 128]
    for i, (c_in, mid, c_out) in enumerate(zip(outs, mids, outs[1:])):
        p = f"additional_blocks.{i}"
        tensors += _conv(f"{p}.0", c_in, mid, 1, False) + _bn(f"{p}.1", mid)
        tensors += _conv(f"{p}.3", mid, c_out, 3, False) + _bn(f"{p}.4", c_out)
    for i, (boxes, c) in enumerate(zip([4, 6, 6, 6, 4, 4], outs)):
        tensors += _conv(f"loc.{i}", c, boxes * 4, 3, True)
    for i, (boxes, c) in enumerate(zip([4, 6, 6, 6, 4, 4], outs)):
        tensors += _conv(f"conf.{i}", c, boxes * classes, 3, True)
    return tensors
