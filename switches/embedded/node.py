"""EmbeddedSwitchNode: the embedded switch as a Mininet switch (switches/mininet_node.py).

What it adds to the common node: a seed for its drop simulator and the links' delay,
which its delay line emulates on kernels without netem; and its control socket in the
network's scratch folder.
"""

from __future__ import annotations

from typing import Any

from switches.embedded import TARGET
from switches.mininet_node import TargetSwitch


class EmbeddedSwitchNode(TargetSwitch):
    target = TARGET

    def __init__(self, name: str, seed: int | None = None, link_delay_ms: float = 0.0, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.seed = seed
        self.link_delay_ms = link_delay_ms
        """Propagation delay of the links, emulated by the switch (kernels without netem)."""

    def data_plane_options(self) -> dict[str, Any]:
        return {**self.portable_data_plane_options(), "scratch_dir": self.scratch_dir}

    def portable_data_plane_options(self) -> dict[str, Any]:
        """Not the scratch folder: it is a path on this machine."""
        return {"seed": self.seed, "link_delay_ms": self.link_delay_ms}
