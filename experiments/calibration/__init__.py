"""Link rates measured on the user's machine: ``run_experiment.py --calibrate``.

The rates a switch target ships (``SwitchTarget.link_rates``) were measured on one 2-core
machine for 8 workers; on a student's VM, a laptop or a server they are wrong. A
calibration measures, with the capacity probe (experiments/capacity.py), the fastest link
rate each target keeps up with at each k and worker count on this machine, keeps a margin
below it, and writes the result to a file the user can read (``record``: the format, where
it lives, which entry a config gets); ``measure`` runs the probes. Loading a config with
``topology.link.bw_mbps: target`` reads the file through ``record`` only, so loading never
starts a probe.
"""
