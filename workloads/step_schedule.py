"""One data-parallel training iteration's time, with each layer's all-reduce overlapping compute.

The schedule is the SwitchML reference's ``dnn_benchmark`` loop, which is also what the
frameworks the paper trains with do:

- forward pass, layer 0 to L-1: a layer waits until its previous all-reduce has finished
  (its parameters are updated), then computes;
- backward pass, layer L-1 to 0: a layer computes, then hands its gradients to the
  all-reduce in the background and the backward pass goes on;
- all-reduces run one at a time, in the order they were handed over (one communication
  stream, as the reference's job queue and NCCL's stream): a layer's starts when its
  backward pass is done and the previous all-reduce has finished.

An iteration is from the end of one backward pass to the end of the next, in the steady
state (the loop runs until two iterations take the same time). Communication hides behind
the backward passes of the layers below and the forward passes of the layers above; what
cannot hide is the first layer's all-reduce, handed over last and needed first.

``comm_s[i]`` is layer i's all-reduce time on an otherwise idle network: the all-reduces
never overlap each other, so a layer's time does not depend on when it starts.
"""

from __future__ import annotations

from collections.abc import Sequence

from workloads.layers import Layer

MAX_ITERATIONS = 16
"""The loop reaches its steady state by the second iteration (every all-reduce of the first
is done before the second's backward pass hands over its first); a few more prove it."""


def overlapped_iteration_s(layers: Sequence[Layer], comm_s: Sequence[float]) -> float:
    """Steady-state iteration time of ``layers`` (forward order) whose all-reduces take ``comm_s``."""
    if len(layers) != len(comm_s) or not layers:
        raise ValueError(f"{len(layers)} layers and {len(comm_s)} all-reduce times: one per layer, at least one")
    if min(comm_s) < 0:
        raise ValueError("all-reduce times must be non-negative")
    done = [0.0] * len(layers)
    now = comm_free = 0.0
    previous_end, previous_period = 0.0, -1.0
    for _ in range(MAX_ITERATIONS):
        for i, layer in enumerate(layers):
            now = max(now, done[i]) + layer.forward_s
        for i in reversed(range(len(layers))):
            now += layers[i].backward_s
            comm_free = done[i] = max(now, comm_free) + comm_s[i]
        period, previous_end = now - previous_end, now
        if abs(period - previous_period) <= 1e-12 * max(period, 1.0):
            return period
        previous_period = period
    return period


def serial_iteration_s(layers: Sequence[Layer], comm_s: Sequence[float]) -> float:
    """Iteration time when the all-reduce waits for the whole backward pass and the forward pass for the whole all-reduce."""
    return sum(layer.forward_s + layer.backward_s for layer in layers) + sum(comm_s)
