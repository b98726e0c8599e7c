"""SwitchML's program on the eBPF target: the C data plane (``switchml.bpf.c``, ``switchml.h``),
its build (``compile.py``), its loading onto a switch's ports (``datapath.py``) and its control
plane over the BPF maps (``maps.py``, ``control.py``). The target's protocol-free parts (the
bpf(2) calls, the probe, the run-time statistics, the Mininet node) stay in switches/ebpf/."""
