"""Analysis of SwitchML testbed results: load runs, aggregate jobs, draw the paper's figures.

Modules, each with one job: ``load`` (files -> DataFrames, format validation),
``aggregate`` (workers -> jobs -> statistics over repetitions), ``models`` (analytic
bounds, composed from each method's own in ``methods/``), ``tables`` (the numbers behind
each figure), ``context`` (emulation rate, switch target and fidelity stamp), ``figures``
(drawing), ``catalog`` (which figures exist and what data each needs), ``run_figure``,
``hierarchical`` and ``shared_switch`` (the figures drawn from one run of their own kind).
``python -m analysis RESULTS --out DIR`` draws every figure whose runs are under RESULTS,
the hierarchical and shared-switch ones included.
"""
