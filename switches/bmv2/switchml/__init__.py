"""SwitchML's data plane on bmv2: p4/switchml.p4 as the bmv2 build compiles it (``program``),
and the controller that answers its L2 learning digests while it runs (``learning``)."""
