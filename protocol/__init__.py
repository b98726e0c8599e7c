"""The contracts both sides of a boundary share, each written down once.

- The SwitchML protocol as workers and switches speak it: ``params`` (read from
  p4/include/constants.p4), ``packet`` (the wire layout), ``scapy_layer`` (the same for
  dissection), ``quantize``, ``plan`` (how a tensor maps onto packets and slots).
- The testbed's own: ``worker_spec`` (what the runner tells every worker process) and
  ``results_format`` (what a run writes and the analysis reads).
"""
