"""Experiments: a config in, a verified run and its tidy results out.

``config`` loads and validates a config and resolves its sweep points; ``harness`` is the
run skeleton (a point's network, workers, verification); ``kinds`` registers the
experiment kinds built on it: the sweep (``runner``), training (``training_runner``, with
``training_replay`` and ``training_results``) and several jobs on one switch
(``shared_switch``). ``inputs`` makes each rank's tensor, ``workers`` starts and watches
the worker processes, ``job_meter`` measures a job, ``pace`` checks who set its pace,
``verify`` checks results, ``metrics`` and ``results`` compute and write the tables,
``run_dir`` and ``storage`` own the results folder.
"""
