"""``python -m hosts.atp.native``: whether this machine runs ATP's native data path.

Prints ``native`` or ``python``, a tab, and the one line that says why (``resolve("auto")``:
the library is built here if it was not). A run over several servers asks each server this
before it starts (experiments/data_path.py).
"""

from hosts.atp.native import resolve

if __name__ == "__main__":
    chosen = resolve("auto")
    print(f"{chosen.name}\t{chosen.reason}")
