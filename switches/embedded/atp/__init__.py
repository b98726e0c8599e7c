"""ATP's data plane on the embedded switch: the reference model the other targets mirror.

``parser`` (ATPParser), ``ingress`` (ATPIngress: the shared aggregator pool), ``egress``
(ATPEgress: per-worker result addressing, ECN marking) and ``pipeline`` (one frame through
all of them, sans-IO: frames in, (port, frame) out). Names follow docs/dataplane-atp.md, which
the future P4_16 program and eBPF program will use too. Not yet wired to the switch process
or a SwitchTarget: that waits for the in-network aggregation plug-in axis (hosts/atp/README.md).
"""
