"""What every protocol's per-k P4 generator shares: the element names, writing and checking
the generated files, and the command line.

P4 has no loops, so a program that carries k values per packet writes k header fields,
k registers and k blocks of statements; each protocol's ``p4/<protocol>/gen_elements.py``
renders its own text for a k, and this module does the rest the same way for all of them, so
``--k``, ``--out`` and ``--check`` mean one thing whichever program a user builds by hand.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

log = logging.getLogger("gen_elements")

Renderer = Callable[[int], dict[str, str]]
"""k -> file name -> text, for every generated file of a program."""


def element_names(k: int, k_choices: Sequence[int]) -> list[str]:
    """Suffixes '00', '01', .. '99', '100', ..: the headers' d00.. and the registers' value_00..
    (two digits at least, so k = 32 keeps the names it has always had)."""
    if k not in k_choices:
        raise ValueError(f"k must be one of {tuple(k_choices)}, got {k}")
    return [f"{i:02d}" for i in range(k)]


def write(files: dict[str, str], directory: Path) -> None:
    """Write generated files into ``directory`` (created if missing)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)


def stale(files: dict[str, str], directory: Path) -> list[str]:
    """The generated files that are missing from ``directory`` or differ from ``files``."""
    return [name for name, text in files.items() if not (directory / name).is_file() or (directory / name).read_text() != text]


def main(argv: list[str] | None, *, description: str, script: str, rendered: Renderer, default_k: int,
         k_choices: Sequence[int], include_dir: Path) -> int:
    """The generator's command line: rewrite ``include_dir`` for the default k, write another
    k's files into ``--out``, or ``--check`` that a folder is up to date (exit 1 if not)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--k", type=int, default=default_k, choices=k_choices,
                        help=f"values per packet (default {default_k}, the k of {include_dir.relative_to(include_dir.parents[2])}'s copies)")
    parser.add_argument("--out", type=Path, default=include_dir, help="directory to write into (default: the program's include/)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the files in --out are not up to date")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    files = rendered(args.k)
    if args.check:
        if problems := stale(files, args.out):
            log.error("%s stale in %s: run python %s", ", ".join(problems), args.out, script)
            return 1
        log.info("%s is up to date (k = %d)", args.out, args.k)
        return 0
    write(files, args.out)
    log.info("wrote %s in %s (k = %d)", ", ".join(files), args.out, args.k)
    return 0
