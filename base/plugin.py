"""Plug-in references: the registries (methods/, workloads/kinds/) name host code as
"module:attribute" strings, so that a low layer can point at code of a higher one without
importing it; the host side resolves them here, at the moment it runs them."""

from __future__ import annotations

import importlib
from typing import Any


def resolve(reference: str) -> Any:
    """The object a "module:attribute" reference names (imported now)."""
    module, sep, attribute = reference.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"{reference!r} is not a 'module:attribute' reference")
    return getattr(importlib.import_module(module), attribute)
