"""The SwitchML protocol as both sides speak it: parameters, packet layout, quantization."""
