"""The contracts both sides of a boundary share, each written down once.

- What every in-network aggregation protocol shares: ``packet`` (the Ethernet/IPv4/UDP
  frame its packets travel in, the int32 elements), ``params`` (the tree's paths, the
  switch's address, link-rate units) and ``quantize`` (float32 to int32 and back).
- Each protocol's own, in a folder named after it: ``switchml/`` (its header, its
  constants read from p4/switchml/include/constants.p4, its job plan, its scapy layer) and ``atp/``.
- The testbed's own: ``worker_spec`` (what the runner tells every worker process) and
  ``results_format`` (what a run writes and the analysis reads).
"""
