"""The simulated clock's event loop in C for a star (star.c), with worker.c as every worker.

star.c includes hosts/switchml/native/worker.c, so it is built by the same function, into
the same cache (hosts/switchml/native: ``build``), and loaded with ctypes once per process.
star.py is the Python side: which networks it runs (``star_problem``) and the state it
hands to the loop and takes back. ``STAR`` is the loop as the simulated network takes it
(simulation/network.py's ``NativeLoop``), SwitchML's record's ``simulated_loop``.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import TYPE_CHECKING

from hosts.switchml.native import NativeUnavailable, build
from hosts.switchml.native import library as worker_library
from simulation.switchml.native.star import NativeStar, declare_star, star_of, star_problem
from switches.target import SimulatedSwitch

if TYPE_CHECKING:
    from simulation.network import LoopShape, SimulatedNetwork

SOURCE = Path(__file__).with_name("star.c")
LIBRARY = "libswitchml_star.so"


@functools.cache
def library() -> ctypes.CDLL:
    """star.c, built and loaded once per process (NativeUnavailable if it cannot be)."""
    from hosts.switchml.native.job import declare

    worker_library()  # worker.c builds and its structs match: star.c is worker.c plus the loop
    path = build(source=SOURCE, library=LIBRARY)
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise NativeUnavailable(f"{path} does not load: {exc}") from exc
    declare(lib)
    declare_star(lib)
    return lib


class StarLoop:
    """star.c as the simulated network's ``NativeLoop``."""

    name = "simulation/switchml/native/star.c's event loop"
    scope = "a star of one job with loss on its links (simulation/switchml/native)"

    def build(self) -> None:
        library()

    def problem(self, shape: LoopShape, switch: SimulatedSwitch) -> str | None:
        return star_problem(shape, switch)

    def run(self, network: SimulatedNetwork) -> NativeStar:
        return star_of(network)


STAR = StarLoop()
