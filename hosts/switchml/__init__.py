"""SwitchML worker library: all-reduce through an aggregating switch (see docs/dataplane.md)."""

from hosts.switchml.client import SwitchMLClient
from hosts.switchml.core import AllReduceResult, SwitchMLTimeout, UnsummableTensor
from hosts.switchml.timers import RetransmitPolicy

__all__ = ["AllReduceResult", "RetransmitPolicy", "SwitchMLClient", "SwitchMLTimeout", "UnsummableTensor"]
