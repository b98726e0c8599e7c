"""Analysis of SwitchML testbed results: load runs, aggregate jobs, draw the paper's figures.

Modules, each with one job: ``load`` (files -> DataFrames, format validation),
``aggregate`` (workers -> jobs -> statistics over repetitions), ``models`` (analytic
bounds), ``tables`` (the numbers behind each figure), ``context`` (emulation rate, switch
target and fidelity stamp), ``figures`` (drawing), ``catalog`` (which figures exist and
what data each needs). ``python -m analysis`` regenerates them all.
"""
