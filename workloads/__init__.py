"""Workloads for the experiments: synthetic tensors, model gradient traces, and a model to train.

- :mod:`workloads.synthetic`: deterministic per-(seed, rank) tensors with documented distributions.
- :mod:`workloads.trace`: the trace file format, its validating loader and writer.
- :mod:`workloads.architectures` / :mod:`workloads.make_traces`: how the shipped traces were derived.
- :mod:`workloads.record`: record a trace from real gradients; replay a trace as tensors.
- :mod:`workloads.layers` / :mod:`workloads.measure_layers`: a trace's layers and their measured compute shares.
- :mod:`workloads.step_schedule`: one training iteration's time with each layer's all-reduce overlapping compute.
- :mod:`workloads.training`: the training workload, a numpy MLP on scikit-learn's digits.
- :mod:`workloads.torch_cnn`: the torch workload's model, a small PyTorch CNN on the same data (imports torch).
"""
