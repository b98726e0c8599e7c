"""SwitchML's contracts that both sides of a boundary share, in SwitchML's own folder of the
protocol layer (docs/architecture.md, "In-network aggregation"): its parameters
(``params.py``, read from p4/switchml/include/constants.p4), its header on the wire (``packet.py``),
the job plan (``plan.py``: which packet goes to which slot and chunk, shared by the worker,
the simulator and the analytic models) and the scapy layer of its header
(``scapy_layer.py``: tests, pcaps, debugging). The frame around its header and the
quantizer are every protocol's: ``protocol/packet.py`` and ``protocol/quantize.py``."""
