"""ATP on bmv2: p4/atp/atp.p4 compiled per k and pool size (``compile``), run by simple_switch,
and programmed over Thrift (``control``). Not yet a protocol of the bmv2 target: the methods
registry and the target's declared protocols wire it in (hosts/atp/README.md)."""
