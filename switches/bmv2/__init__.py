"""The bmv2 target: p4/switchml.p4 compiled by p4c, run by simple_switch, programmed over Thrift."""
