"""``python -m hosts.switchml.native``: whether this machine runs the native data path.

Prints ``native`` or ``python``, a tab, and the one line that says why (``resolve("auto")``:
the library is built here if it was not). A run over several servers asks each server
this before it starts (experiments/data_path.py); a user may ask it too.
"""

from hosts.switchml.native import resolve

if __name__ == "__main__":
    chosen = resolve("auto")
    print(f"{chosen.name}\t{chosen.reason}")
