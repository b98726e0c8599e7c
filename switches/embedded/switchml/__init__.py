"""SwitchML's data plane on the embedded switch: p4/switchml.p4 in Python, control by control.

``parser`` (SwitchMLParser), ``ingress`` (SwitchMLIngress), ``responder`` (its ARP and ICMP
echo answers), ``egress`` (SwitchMLEgress) and ``pipeline`` (one packet through all of them
and the shared traffic manager). What every protocol's program on this target uses (tables,
registers, the traffic manager, the address headers, the checksum) is one folder up.
"""
