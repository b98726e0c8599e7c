"""What runs on the emulated hosts, one process per rank.

``worker`` is the process (``python -m hosts.worker SPEC --rank R``); ``allreduce`` builds a
rank's method from the worker spec; ``events`` is its side of the conversation with the
runner; ``training`` the training workload's step loop. The methods: ``switchml/`` (the
SwitchML worker library), ``ring_allreduce`` and ``parameter_server`` (the baselines, over
``tcp_mesh``, with ``collective`` and ``tcp_counters``), ``gloo_allreduce`` (PyTorch's);
``stats`` the statistics all report. PyTorch's side (the optional extra; these import torch):
``torch_hook`` (the DDP communication hook through the switch), ``torch_training`` (the
torch workload's DDP step loop) and ``ddp_script`` (a user's DDP script as a rank).
"""
