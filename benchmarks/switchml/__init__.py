"""SwitchML's own benchmarks (its folder, as benchmarks/atp/ is ATP's): the main job against its
line-rate bound, its switch programs' aggregation rate, and the simulated clock's speed and
fidelity on its workers."""
