"""The eBPF switch target: docs/dataplane.md as a TC (clsact) program in the kernel.

``switchml.bpf.c`` is the data plane (read it beside p4/include/ingress.p4 and
switches/embedded/ingress.py), ``compile.py`` builds it with clang, ``datapath.py`` loads
it onto a switch's ports and takes it off, ``control.py`` programs it through the
common control-plane interface over its BPF maps (``maps.py``, ``bpf.py``), ``probe.py``
says whether this machine can run it, and ``node.py`` is its Mininet switch.
"""
