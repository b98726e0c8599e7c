"""ATP's part of the switches shared by every target: its control plane (``programming``).
Each target's ATP data plane is in its own package (switches/<target>/atp/)."""
