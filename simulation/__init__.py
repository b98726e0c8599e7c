"""The testbed on a simulated clock: the SwitchML worker's and the switch's own code,
driven by discrete events instead of sockets and wall time (``run_experiment.py --simulate``).

Nothing of the protocol is written again here. A worker is ``hosts/switchml/core.py``'s
``WorkerCore``, loop policy included, whose steps worker.py drives with events (as
``hosts/switchml/job.py`` drives them with a socket); a
switch is its target's own data plane (``SwitchTarget.simulated``: the embedded switch's
``SwitchMLPipeline``), programmed by ``switches/fabric.py`` and ``switches/switchml/programming.py``
over an in-process ``SwitchControl``, as in emulation. What is modelled is only what sits
between them: links (link.py: serialization at the link rate, propagation delay, a
drop-tail queue, loss) and the hosts' per-packet cost.

Why SimPy (PyPI ``simpy``, pure Python) and not ns-3: the code under test is Python, so
every event crosses into Python anyway, and the network model needed here is a FIFO per
link direction, which is a few lines over any event queue. ns-3's models (its TCP, its
queues) are C++ behind cppyy: its PyPI wheel takes 30-50 s to import on this machine
before the first event, and each packet handed between its C++ devices and the Python
switch would cross the binding twice. SimPy gives the clock, the event queue and
processes (a worker's loop is a generator, as job.py's is a loop) at no start-up cost.

SimPy's per-event cost in Python is what bounds it, though (7-11 us of wall time per frame).
A star of one job, the shape of the paper's figures, therefore also runs on native/star.c:
the same events in the same order in C, with worker.c as the worker and the embedded
pipeline's aggregation path as the switch, proven equal frame for frame by
tests/test_native_star.py (docs/simulation.md).
"""
