"""The embedded software switch: a Python model of p4/switchml.p4 that owns real ports.

It runs as its own process (``python -m switches.embedded``), reads and writes frames on
Linux interfaces through AF_PACKET sockets, and is programmed through the same
``SwitchControl`` vocabulary as bmv2. Modules follow docs/dataplane.md control by control:
``parser`` (SwitchMLParser/Deparser), ``ingress`` (SwitchMLIngress), ``traffic_manager``,
``egress`` (SwitchMLEgress), ``pipeline`` (one packet through all of them), ``switch``
(the port I/O loop) and ``control_server`` / ``control_client`` (the runtime API).
"""
