"""Which runs a set of figures is drawn from, where they came from, and whether they mix.

``python -m analysis`` prints one line per figure naming its run, the commit and version
that ran it, its clock, target, link rate and kernel (summary.json's ``provenance``,
experiments/provenance.py). Figures meant to be read together must come from the same code
and the same clock: it refuses a set whose runs span several commits (or one commit both
clean and dirty, or with different uncommitted changes) unless told ``--mixed-commits``, and one that
mixes emulated and simulated runs unless told ``--mixed-clocks`` (or given ``--clock``).
Runs older than provenance (before 0.2.0) count as one unknown commit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analysis.context import EMULATED, SIMULATED
from protocol import results_format as fmt

UNKNOWN = "unknown commit (run older than summary.json's provenance)"


@dataclass(frozen=True)
class Drawn:
    """One run a figure is drawn from, with what its summary.json says of where it came from."""

    figure: str
    run: Path
    provenance: dict[str, Any]
    simulated: bool

    @classmethod
    def read(cls, figure: str, run: Path) -> Drawn:
        summary = json.loads((run / fmt.SUMMARY_FILE).read_text())
        return cls(figure, run, summary.get(fmt.PROVENANCE_KEY) or {}, fmt.is_simulated(summary))

    @property
    def clock(self) -> str:
        return SIMULATED if self.simulated else EMULATED

    @property
    def code(self) -> str:
        """The code that ran: its commit, marked dirty where the tree had changes."""
        sha = self.provenance.get("commit")
        if not sha:
            return UNKNOWN
        if not self.provenance.get("dirty"):
            return sha[:12]
        changes = self.provenance.get("changes")
        return f"{sha[:12]} (dirty{f', changes {changes}' if changes else ''})"

    def line(self) -> str:
        """``figure: run, commit, version, clock, target, rate (its source), kernel, tools, command``."""
        p = self.provenance
        parts = [f"{self.figure}: {self.run}", f"commit {self.code}"]
        if p:
            rate = p.get("link_rate") or {}
            parts += [f"version {p.get('version')}", self.clock, f"target {p.get('switch_target')}",
                      f"{rate.get('mbps')} Mbit/s from {rate.get('source')}", f"kernel {p.get('kernel')}"]
            parts += [f"{tool} {version}" for tool, version in (p.get("tools") or {}).items()]
            parts.append("command: " + " ".join(p.get("command") or []))
        else:
            parts.append(self.clock)
        return "; ".join(parts)


def mixing(drawn: list[Drawn], mixed_commits: bool, mixed_clocks: bool) -> str | None:
    """Why these runs must not make one set of figures (one line naming the flag that allows
    it), or None."""
    codes = sorted({d.code for d in drawn})
    if len(codes) > 1 and not mixed_commits:
        by_code = "; ".join(f"{code}: {', '.join(d.figure for d in drawn if d.code == code)}" for code in codes)
        return (f"the figures would be drawn from runs of {len(codes)} different code versions ({by_code}); "
                "run them again on one commit, or pass --mixed-commits to draw them anyway")
    clocks = sorted({d.clock for d in drawn})
    if len(clocks) > 1 and not mixed_clocks:
        simulated = ", ".join(d.figure for d in drawn if d.simulated)
        return (f"the figures would mix emulated and simulated runs (simulated: {simulated}); pass --clock emulated or "
                "--clock simulated to draw one clock's, or --mixed-clocks to draw both")
    return None
