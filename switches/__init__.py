"""Switch targets (embedded software switch, bmv2) behind one control-plane interface."""
