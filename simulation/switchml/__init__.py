"""SwitchML on the simulated clock: its own driver of hosts/switchml/core.py's ``WorkerCore``
(worker.py, built from the worker spec by driver.py: the record's ``simulated_host``) and the
compiled event loop that runs a star of its workers in C (native/: star.c, which mirrors that
driver event for event; the record's ``simulated_loop``). The network they run on,
simulation/network.py, is every protocol's."""
