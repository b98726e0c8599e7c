"""ATP's own benchmarks (its folder, as hosts/atp/ and protocol/atp/ are)."""
