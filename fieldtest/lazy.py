"""Lazy package attributes (PEP 562): a package names what it offers, and importing the package
loads none of the modules behind those names until one is used."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_attributes(package: str, where: dict[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``where`` maps a name to the submodule that defines
    it (``".analyze"``); the first use imports it and keeps the value in ``namespace``."""

    def __getattr__(name: str) -> Any:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(where[name], package), name)
        namespace[name] = value
        return value

    return __getattr__
