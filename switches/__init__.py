"""Switch targets behind one control-plane interface, and the control plane that programs them.

Three targets run the same data plane (docs/dataplane.md): ``embedded/`` (a software model
of p4/switchml.p4 in Python), ``bmv2/`` (the P4 program in simple_switch) and ``ebpf/``
(a TC program in the kernel). Each package describes itself as a target (``TARGET``, a
``target.SwitchTarget``) and ``targets.py`` lists them and resolves ``auto``; a target's
Mininet node shares its lifecycle (``mininet_node.py``), and ``standalone.py`` runs any
target outside Mininet. ``control.py`` is the control-plane interface every target
implements, ``programming.py`` the tables, registers and jobs it programs, and
``fabric.py`` how every switch of a network is programmed from the facts the network
hands over.
"""
