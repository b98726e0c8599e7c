"""What runs on the emulated hosts: the SwitchML worker library and the baselines."""
