"""ATP's hosts, sans-IO: the worker (``worker``), its aggregator choice (``aggregators``) and
the parameter server (``parameter_server``). hosts/atp/README.md says what each does, what was
simplified and what remains to wire up once in-network aggregation is a plug-in axis."""
