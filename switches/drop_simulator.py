"""The drop simulator's control plane, for every protocol's program that has one.

Without netem, link loss is emulated by the switch program itself: its ingress drops a frame
on arrival, before anything else happens to it, and its egress drops a copy about to leave,
each when a uniform draw in [0, DROP_DRAW_MAX] (v1model's ``random(draw, 0, 0xFFFFFFFE)``)
is below a one-cell threshold register. SwitchML's and ATP's programs name those registers
alike, after their own ingress and egress controls (``<Ingress>.ingress_drop_threshold``,
``<Egress>.egress_drop_threshold``), and count the drops alike (``EV_DROP_SIM_INGRESS`` in the
ingress's event counter, ``EGV_DROP_SIM_EGRESS`` in the egress's). So one ``DropSimulator``,
built from a program's control names, programs it on every target through ``SwitchControl``,
and ``program_drop_rates`` is the one path from a network's ``Fabric.drop_rates`` (the
topology's loss, topologies/model.py's ``drop_simulator_rates``) to the registers, which each
protocol's ``program_fabric`` takes.
"""

from __future__ import annotations

from dataclasses import dataclass

from switches.control import SwitchControl
from switches.fabric import Fabric

INGRESS_DROP_THRESHOLD = "ingress_drop_threshold"
EGRESS_DROP_THRESHOLD = "egress_drop_threshold"
"""The registers' names inside a program's ingress and egress controls."""
DROP_DRAW_MAX = 0xFFFFFFFE
"""Largest value v1model's random(draw, 0, 0xFFFFFFFE) returns."""


def probability_threshold(probability: float) -> int:
    """Drop-simulator threshold for a drop probability in [0, 1]: 1 is above every draw."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"drop probability must be within [0, 1], got {probability}")
    return round(probability * (DROP_DRAW_MAX + 1))


@dataclass(frozen=True)
class DropSimulator:
    """The drop simulator of a program whose controls are named ``ingress`` and ``egress``."""

    ingress: str
    egress: str

    @property
    def ingress_threshold(self) -> str:
        return f"{self.ingress}.{INGRESS_DROP_THRESHOLD}"

    @property
    def egress_threshold(self) -> str:
        return f"{self.egress}.{EGRESS_DROP_THRESHOLD}"

    def set_probability(self, control: SwitchControl, ingress: float, egress: float) -> None:
        """Loss without netem: every frame dropped on arrival with probability ``ingress``, every
        copy about to leave with probability ``egress``."""
        control.register_write(self.ingress_threshold, 0, probability_threshold(ingress))
        control.register_write(self.egress_threshold, 0, probability_threshold(egress))

    def program_drop_rates(self, control: SwitchControl, fabric: Fabric, switch: str) -> None:
        """``switch``'s drop simulator at the fabric's rates for it; left as it is where the
        fabric has no loss to emulate (``drop_rates`` None: netem's, or none)."""
        if fabric.drop_rates is not None:
            self.set_probability(control, *fabric.drop_rates[switch])
