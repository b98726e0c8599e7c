"""The optional dependencies a config may need, and why they are missing, found without
importing them (importing PyTorch takes seconds; a config is refused before that).

Both a method (gloo) and the workloads that train with DDP (torch, ddp_script) need
PyTorch, so the one check lives here, below both registries.
"""

from __future__ import annotations

import importlib.util

TORCH_INSTALL = "pip install -e '.[torch]' (or ./scripts/bootstrap.sh --torch)"
"""How to get PyTorch here: the optional extra of pyproject.toml, or bootstrap's option."""


def torch_unavailable() -> str | None:
    """Why PyTorch cannot be used here (one sentence naming how to install it), or None."""
    if importlib.util.find_spec("torch") is None:
        return f"needs PyTorch, which is not installed: {TORCH_INSTALL}"
    return None
