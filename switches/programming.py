"""Where the shared-switch kind (experiments/kinds/shared_switch.py) still imports admission
from: the slots' partition is switches/fabric.py's, SwitchML's programmer is
switches/switchml/programming.py. Goes once that kind imports switches.fabric."""

from switches.fabric import AdmissionError, partition_slots

__all__ = ["AdmissionError", "partition_slots"]
