"""SwitchML's contracts that both sides of a boundary share, in SwitchML's own folder of the
protocol layer (docs/architecture.md, "In-network aggregation"): the job plan (``plan.py``:
which packet goes to which slot and chunk, shared by the worker, the simulator and the
analytic models) and the scapy layer of its header (``scapy_layer.py``: tests, pcaps,
debugging). Its wire format, parameters and quantizer are still ``protocol/packet.py``,
``params.py`` and ``quantize.py``, which many layers import."""
