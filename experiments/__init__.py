"""Experiments: a config in, a verified run and its tidy results out.

``config`` loads and validates a config and resolves its sweep points; ``harness`` is the
run skeleton (a point's network, its workers, the verification of their results);
``kinds/`` holds the experiment kinds built on it and their registry: the sweep, training,
and several jobs on one switch. ``inputs`` makes each rank's tensor, ``workers`` starts and
watches the worker processes, ``job_meter`` measures a job, ``pace`` checks who set its
pace, ``verify`` checks results, ``metrics`` and ``results`` compute and write the tables,
``run_dir`` and ``storage`` own the results folder.
"""
