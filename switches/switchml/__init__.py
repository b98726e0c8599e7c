"""SwitchML's part of the switches shared by every target: its control plane (``programming``)
and what its slots show of a job that missed its deadline (``evidence``). Each target's
SwitchML data plane is in its own package (switches/<target>/switchml/)."""
