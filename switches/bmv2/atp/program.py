"""p4/atp.p4 as the bmv2 build compiles it: its files, its per-k generator and its defines.

The build (switches/bmv2/compile.py) writes ``p4/atp/gen_elements.py``'s per-value code for the
run's k into its own include folder and compiles with ``-DATP_K`` and ``-DATP_POOL_SIZE`` (the
switch's pool is ATP's aggregators; p4/README.md). The program sends no digests, and its
process class (switch.py) sets each port's queue rate so that ECN marks where the link is the
bottleneck.
"""

from __future__ import annotations

from protocol.atp import params
from switches.bmv2.compile import P4Program


def defines(k: int, max_pool_size: int) -> list[str]:
    return [f"-DATP_POOL_SIZE={max_pool_size}", f"-DATP_K={k}"]


def check(k: int, max_pool_size: int) -> None:
    if k not in params.K_CHOICES:
        raise ValueError(f"k must be one of {params.K_CHOICES}, got {k}")
    if not 1 <= max_pool_size <= params.MAX_POOL_SIZE:
        raise ValueError(f"ATP pool size must be 1..{params.MAX_POOL_SIZE}, got {max_pool_size}")


PROGRAM = P4Program(main=params.ATP_P4_MAIN, include=params.ATP_P4_DIR / "include", sources=params.ATP_P4_DIR,
                    generator=params.ATP_P4_DIR / "gen_elements.py", defines=defines, check=check,
                    process="switches.bmv2.atp.switch:ATPBmv2Process")
