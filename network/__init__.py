"""The emulated network: Mininet built from a topology, shaped with tc, switches programmed."""
