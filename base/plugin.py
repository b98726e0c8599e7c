"""Plug-ins: a registry's records found by name, and the "module:attribute" references
through which the registries (methods/, workloads/kinds/) name host code, so that a low
layer can point at code of a higher one without importing it; the host side resolves them
here, at the moment it runs them."""

from __future__ import annotations

import importlib
from typing import Any, Iterable, Protocol, TypeVar


class Named(Protocol):
    name: str


Record = TypeVar("Record", bound=Named)


def named(registry: Iterable[Record], name: str, what: str) -> Record:
    """The record of ``registry`` called ``name``; a KeyError naming the registered ones
    otherwise (every registry's ``by_name``: methods, workload kinds, experiment kinds)."""
    records = list(registry)
    for record in records:
        if record.name == name:
            return record
    raise KeyError(f"no {what} named {name!r}; registered: {', '.join(record.name for record in records)}")


def resolve(reference: str) -> Any:
    """The object a "module:attribute" reference names (imported now)."""
    module, sep, attribute = reference.partition(":")
    if not sep or not module or not attribute:
        raise ValueError(f"{reference!r} is not a 'module:attribute' reference")
    return getattr(importlib.import_module(module), attribute)
