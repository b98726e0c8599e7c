"""ATP on bmv2: p4/atp.p4 as the build compiles it (``program``: its ``P4Program``, the
target's ``PROGRAMS`` line), run by simple_switch with its ports paced (``switch``), and
programmed over Thrift (``control``)."""
