"""ATP's program on the eBPF target: the C data plane (``atp.bpf.c``, ``atp.h``), its build
(``compile.py``), its data plane for the target's loader (``datapath.py``), its maps and control
plane (``maps.py``, ``control.py``); what the control plane installs is every target's
(switches/atp/programming.py).
Read it beside switches/embedded/atp/, the reference pipeline, and docs/dataplane-atp.md."""
