"""ATP (Lao et al., NSDI'21) as workers, parameter servers and switches speak it.

``params`` (ports, pool size, flags, counter cells), ``packet`` (the wire layout, struct-based
for the hot path), ``scapy_layer`` (the same for dissection and tests) and ``quantize`` (the
fixed job-wide scale that makes ATP's sums exact integers). Nothing here imports SwitchML's
wire format: the two protocols share only the arithmetic of protocol/quantize.py.
"""
