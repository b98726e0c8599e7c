"""The worker's half of its conversation with the runner: one JSON object per stdout line
(the messages are listed in hosts/worker.py)."""

from __future__ import annotations

import json
import sys
from typing import Any


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()
