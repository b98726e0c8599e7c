"""ATP's data plane on the embedded switch: the reference model the other targets mirror.

``parser`` (ATPParser), ``ingress`` (ATPIngress: the shared aggregator pool), ``egress``
(ATPEgress: per-worker result addressing, ECN marking) and ``pipeline`` (one frame through
all of them, sans-IO: frames in, (port, frame) out). Names follow docs/dataplane-atp.md, which
the P4_16 program and the eBPF program use too. ``simulated`` (ATPSwitch) runs the pipeline on
the simulated clock (the embedded target's ``SIMULATED_PROGRAMS``); the switch process does
not run it yet (hosts/atp/README.md, "What remains").
"""
