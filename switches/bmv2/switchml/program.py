"""p4/switchml.p4 as the bmv2 build compiles it: its files, its per-k generator, its defines,
and the controller that answers its L2 learning digests (learning.py).

The build (switches/bmv2/compile.py) writes ``p4/switchml/gen_elements.py``'s per-element code for the
run's k into its own include folder and compiles with ``-DSWITCHML_K`` and
``-DSWITCHML_MAX_POOL_SIZE`` (p4/README.md).
"""

from __future__ import annotations

from protocol.switchml import params
from protocol.switchml.packet import MAX_SLOT_LIMIT
from switches.bmv2.compile import P4Program

def defines(k: int, max_pool_size: int) -> list[str]:
    return [f"-DSWITCHML_MAX_POOL_SIZE={max_pool_size}", f"-DSWITCHML_K={k}"]


def check(k: int, max_pool_size: int) -> None:
    if not 1 <= max_pool_size <= MAX_SLOT_LIMIT:
        raise ValueError(f"max_pool_size must be within 1..{MAX_SLOT_LIMIT}, got {max_pool_size}")
    if k not in params.K_CHOICES:
        raise ValueError(f"k must be one of {params.K_CHOICES}, got {k}")


PROGRAM = P4Program(main=params.P4_MAIN, include=params.P4_PROGRAM_DIR / "include",
                    sources=params.P4_PROGRAM_DIR, generator=params.P4_PROGRAM_DIR / "gen_elements.py", defines=defines, check=check,
                    controller="switches.bmv2.switchml.learning:L2LearningController")
