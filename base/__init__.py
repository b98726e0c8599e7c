"""The ground floor: helpers every layer may use, importing nothing of the project's own.

- ``yamlschema``: YAML files validated against a JSON Schema, errors naming the file and key;
- ``lifetime``: what a run starts dies with it, and a teardown is not cut short by a signal;
- ``linux_sockets``: the Linux socket constants and structures Python's socket module lacks;
- ``netns``: network namespaces cabled by veth pairs (the packet-level tests and benchmarks).
"""
